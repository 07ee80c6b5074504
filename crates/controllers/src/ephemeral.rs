//! The ephemeral volume controller (upstream `pkg/controller/volume/ephemeral`): every
//! generic ephemeral volume of a pod (`spec.volumes[].ephemeral.volumeClaimTemplate`)
//! gets its PersistentVolumeClaim, `<pod>-<volume>`, made from the template (its labels,
//! annotations and spec) and controlled by the pod, so that the garbage collector
//! deletes it with the pod. From there the claim is bound like any other: the scheduler
//! and the kubelet follow the volume to it (`ferrokube_api::ephemeral`).
//!
//! A claim of that name the pod does not control is never taken over: the pod gets a
//! `FailedBinding` event and the key is retried with backoff, as upstream (the
//! scheduler keeps such a pod pending).
//!
//! As upstream, only pod additions are watched (a pod's volumes never change; the
//! claim goes with the pod through its owner reference), plus the deletion of a claim
//! that a live pod's ephemeral volume needs, which is created again.

use std::sync::{Arc, LazyLock};

use ferrokube_api::ephemeral;
use ferrokube_component_base::metrics::CounterVec;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::pvcprotection::{POD_CLAIM_INDEX, index_pods_by_claim};
use crate::{Action, Controller, Error, Result};

/// Upstream `events.FailedBinding`, the reason of the pod's event when a claim cannot
/// be made.
pub const FAILED_BINDING: &str = "FailedBinding";

/// The component upstream's controller records its events as.
pub const EVENT_COMPONENT: &str = "ephemeral_volume";

/// `ephemeral_volume_controller_create_total`: every claim creation request, failed or
/// not. Process-wide, as upstream's legacy registry. The help text is upstream's,
/// spelling included.
static CREATE_TOTAL: LazyLock<CounterVec<0>> = LazyLock::new(|| {
    CounterVec::new(
        "ephemeral_volume_controller_create_total",
        "[ALPHA] Number of PersistenVolumeClaims creation requests",
        [],
    )
});

/// `ephemeral_volume_controller_create_failures_total`: the creation requests that
/// failed.
static CREATE_FAILURES_TOTAL: LazyLock<CounterVec<0>> = LazyLock::new(|| {
    CounterVec::new(
        "ephemeral_volume_controller_create_failures_total",
        "[ALPHA] Number of PersistenVolumeClaims creation requests",
        [],
    )
});

/// Writes the controller's metrics (for the manager's `/metrics`, while it runs).
pub fn write_metrics(out: &mut String) {
    CREATE_TOTAL.render(out);
    CREATE_FAILURES_TOTAL.render(out);
}

/// Claim creation requests so far, and how many failed (tests).
pub fn create_counts() -> (u64, u64) {
    (CREATE_TOTAL.value([]), CREATE_FAILURES_TOTAL.value([]))
}

/// Whether the pod has work for the controller: not being deleted, with an ephemeral
/// volume (upstream `enqueuePod`'s filter).
pub fn wants(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| v.ephemeral.is_some())
}

/// The claim the pod's ephemeral volume `volume` is served by: its name from
/// [`ephemeral::volume_claim_name`], the template's labels, annotations and spec, and
/// the pod as controller blocking its deletion until the claim is gone (as upstream's
/// `handleVolume`).
pub fn claim_for(pod: &Pod, volume: &Volume) -> Result<PersistentVolumeClaim, String> {
    let template = volume
        .ephemeral
        .as_ref()
        .and_then(|e| e.volume_claim_template.as_ref())
        .ok_or_else(|| "no volumeClaimTemplate".to_string())?;
    let template_meta = template.metadata.clone().unwrap_or_default();
    Ok(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(ephemeral::volume_claim_name(pod, volume)),
            namespace: pod.metadata.namespace.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            labels: template_meta.labels,
            annotations: template_meta.annotations,
            ..Default::default()
        },
        spec: Some(template.spec.clone()),
        status: None,
    })
}

/// What the controller does for one volume of a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Nothing: not an ephemeral volume, or its claim exists and is the pod's.
    Nothing,
    /// Create this claim.
    Create(Box<PersistentVolumeClaim>),
}

/// Upstream `handleVolume` as a pure function of the volume and the claim of its name
/// (if the cache has one). The error is the message the pod's event gives.
pub fn plan(
    pod: &Pod,
    volume: &Volume,
    existing: Option<&PersistentVolumeClaim>,
) -> Result<Plan, String> {
    if volume.ephemeral.is_none() {
        return Ok(Plan::Nothing);
    }
    match existing {
        Some(claim) => ephemeral::volume_is_for_pod(pod, claim).map(|()| Plan::Nothing),
        None => claim_for(pod, volume).map(|c| Plan::Create(Box::new(c))),
    }
}

/// The ephemeral volume controller.
pub struct EphemeralVolumeController {
    client: kube::Client,
    pods: Store<Pod>,
    claims: Store<PersistentVolumeClaim>,
    recorder: Arc<dyn EventSink>,
}

impl EphemeralVolumeController {
    /// `recorder` records as [`EVENT_COMPONENT`].
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        recorder: Arc<dyn EventSink>,
    ) -> Result<Arc<Self>> {
        let pods = factory.informer::<Pod>();
        index_pods_by_claim(&pods)?;
        // Upstream registers the counters when the controller is built: they read 0
        // before the first claim.
        LazyLock::force(&CREATE_TOTAL);
        LazyLock::force(&CREATE_FAILURES_TOTAL);
        Ok(Arc::new(EphemeralVolumeController {
            client,
            pods: pods.store(),
            claims: factory.informer::<PersistentVolumeClaim>().store(),
            recorder,
        }))
    }

    async fn handle_volume(&self, pod: &Pod, ns: &str, volume: &Volume) -> Result<(), String> {
        let name = ephemeral::volume_claim_name(pod, volume);
        let existing = self.claims.get(&key_of(Some(ns), &name));
        let Plan::Create(claim) = plan(pod, volume, existing.as_deref())? else {
            return Ok(());
        };
        CREATE_TOTAL.inc([]);
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        if let Err(e) = api.create(&PostParams::default(), &claim).await {
            CREATE_FAILURES_TOTAL.inc([]);
            return Err(format!(
                "create PVC {name}: {}",
                ferrokube_client::error_message(&e)
            ));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Controller for EphemeralVolumeController {
    /// Upstream's work queue name.
    fn name(&self) -> &'static str {
        EVENT_COMPONENT
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| {
                if let Notification::Added { obj, .. } = n
                    && wants(&obj)
                {
                    q.add(object_key(&*obj));
                }
            },
            None,
        );
        let q = queue.clone();
        let pods = self.pods.clone();
        factory
            .informer::<PersistentVolumeClaim>()
            .add_event_handler(
                move |n: Notification<PersistentVolumeClaim>| {
                    let Notification::Deleted { obj, .. } = n else {
                        return;
                    };
                    // The index narrows the pods down to those naming the claim; the
                    // reconcile recreates it only for an ephemeral volume's.
                    let key = object_key(&*obj);
                    for pod in pods.by_index(POD_CLAIM_INDEX, &key).unwrap_or_default() {
                        if wants(&pod) {
                            q.add(object_key(&*pod));
                        }
                    }
                },
                None,
            );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(pod) = self.pods.get(key) else {
            return Ok(Action::Done);
        };
        if pod.metadata.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            if let Err(e) = self.handle_volume(&pod, &ns, volume).await {
                emit(
                    &*self.recorder,
                    &*pod,
                    EventType::Warning,
                    FAILED_BINDING,
                    format!("ephemeral volume {}: {e}", volume.name),
                );
                return Err(Error::Invalid(format!(
                    "pod {key}, ephemeral volume {}: {e}",
                    volume.name
                )));
            }
        }
        Ok(Action::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(volumes: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "volumes": volumes}
        }))
        .unwrap()
    }

    fn scratch() -> serde_json::Value {
        json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
            "metadata": {"labels": {"app": "web"}, "annotations": {"note": "x"},
                         "name": "ignored", "finalizers": ["ignored"]},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                     "resources": {"requests": {"storage": "1Gi"}}}}}})
    }

    fn volumes(p: &Pod) -> &[Volume] {
        p.spec.as_ref().unwrap().volumes.as_deref().unwrap()
    }

    #[test]
    fn the_claim_comes_from_the_template_owned_by_the_pod() {
        let p = pod(json!([scratch()]));
        let Ok(Plan::Create(c)) = plan(&p, &volumes(&p)[0], None) else {
            panic!("expected a create");
        };
        let want: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "web-scratch", "namespace": "ns",
                "labels": {"app": "web"}, "annotations": {"note": "x"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web",
                    "uid": "pod-uid", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                     "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .unwrap();
        assert_eq!(*c, want);
        // Created: nothing more to do.
        assert_eq!(plan(&p, &volumes(&p)[0], Some(&c)), Ok(Plan::Nothing));
    }

    #[test]
    fn a_claim_of_the_name_the_pod_does_not_control_is_refused() {
        let p = pod(json!([scratch()]));
        let foreign: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "web-scratch", "namespace": "ns"}
        }))
        .unwrap();
        assert_eq!(
            plan(&p, &volumes(&p)[0], Some(&foreign)),
            Err("PVC ns/web-scratch was not created for pod ns/web (pod is not owner)".into())
        );
        // An earlier pod of the same name made it.
        let mut stale = claim_for(&p, &volumes(&p)[0]).unwrap();
        stale.metadata.owner_references.as_mut().unwrap()[0].uid = "earlier".into();
        assert!(plan(&p, &volumes(&p)[0], Some(&stale)).is_err());
    }

    #[test]
    fn only_live_pods_with_ephemeral_volumes_are_work() {
        let other = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                           {"name": "tmp", "emptyDir": {}}]);
        let p = pod(other.clone());
        assert!(!wants(&p));
        for v in volumes(&p) {
            assert_eq!(plan(&p, v, None), Ok(Plan::Nothing));
        }
        let mut p = pod(json!([{"name": "tmp", "emptyDir": {}}, scratch()]));
        assert!(wants(&p));
        p.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        assert!(!wants(&p));
        // No template (validation forbids it): an error, never a panic.
        let p = pod(json!([{"name": "bad", "ephemeral": {}}]));
        assert_eq!(
            plan(&p, &volumes(&p)[0], None),
            Err("no volumeClaimTemplate".into())
        );
    }

    #[test]
    fn metrics_are_upstreams_counters() {
        let mut out = String::new();
        write_metrics(&mut out);
        assert!(out.contains("# TYPE ephemeral_volume_controller_create_total counter\n"));
        assert!(out.contains("# TYPE ephemeral_volume_controller_create_failures_total counter\n"));
        assert!(out.contains("\nephemeral_volume_controller_create_total "));
    }
}
