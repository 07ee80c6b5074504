//! The PVC protection controller (upstream `pkg/controller/volume/pvcprotection`):
//! a PersistentVolumeClaim being deleted keeps its `kubernetes.io/pvc-protection`
//! finalizer (put on by the StorageObjectInUseProtection admission plugin) while a
//! scheduled pod uses it; the controller removes the finalizer once none does, and
//! adds it to claims that miss it (created before the plugin was on).
//!
//! "Uses" is upstream's `podUsesPVC`: the pod is bound to a node (the kubelet refuses
//! to start a pod whose claim is being deleted, so unscheduled pods do not count) and
//! names the claim in `spec.volumes[].persistentVolumeClaim.claimName`, or has an
//! ephemeral volume whose generated claim (`<pod>-<volume>`, owned by the pod) it is,
//! unless the pod is shut down (deleted with grace period 0). A pod keeps the claim
//! in use whatever its phase, as upstream's: the volume may stay mounted until the
//! pod object is gone.
//!
//! Pure part: [`claims_of`], [`pod_uses_claim`], [`is_deletion_candidate`],
//! [`needs_finalizer`]. The reconcile asks the pod informer's claim index first and,
//! when it finds no user, a live LIST of the namespace's pods (the informer may not
//! have seen a new pod yet), as upstream.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};

use ferrokube_api::ephemeral;
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::util::has_finalizer;
use crate::{Action, Controller, Error, Result, done_unless_failed, split_key};

/// Upstream `volumeutil.PVCProtectionFinalizer`.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";

/// The pod informer's index of the claims each pod references (upstream
/// `common.PodPVCIndex`): `namespace/claim`.
pub(crate) const POD_CLAIM_INDEX: &str = "pod-pvc-index";

/// Adds [`POD_CLAIM_INDEX`] to the shared pod informer, once for every controller that
/// reads it (upstream's `common.AddPodPVCIndexerIfNotPresent`).
pub(crate) fn index_pods_by_claim(
    pods: &ferrokube_client::informer::SharedIndexInformer<Pod>,
) -> Result<()> {
    let by_claim = Arc::new(|p: &Pod| {
        let ns = p.metadata.namespace.as_deref();
        claims_of(p).iter().map(|c| key_of(ns, c)).collect()
    });
    match pods.add_indexer(POD_CLAIM_INDEX, by_claim) {
        Ok(()) | Err(ferrokube_client::Error::IndexerConflict(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Upstream `protectionutil.IsDeletionCandidate`: being deleted and still holding
/// `finalizer`.
pub fn is_deletion_candidate(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.deletion_timestamp.is_some() && has_finalizer(meta, finalizer)
}

/// Upstream `protectionutil.NeedToAddFinalizer`: not being deleted and missing
/// `finalizer`.
pub fn needs_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.deletion_timestamp.is_none() && !has_finalizer(meta, finalizer)
}

/// `meta` with `finalizer` added (`add`) or removed; the object to PUT back.
pub fn with_finalizer(meta: &ObjectMeta, finalizer: &str, add: bool) -> ObjectMeta {
    let mut meta = meta.clone();
    let list = meta.finalizers.get_or_insert_with(Vec::new);
    list.retain(|f| f != finalizer);
    if add {
        list.push(finalizer.to_string());
    }
    meta
}

/// The names of the claims `pod` references, directly or through its ephemeral
/// volumes (upstream `enqueuePVCs` / the pod PVC index).
pub fn claims_of(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| ephemeral::claim_of_volume(pod, v).map(|(name, _)| name))
        .collect()
}

/// Upstream `podIsShutDown`: deleted with grace period 0 (by the kubelet once the
/// volumes are unmounted, or forcibly); only waiting for garbage collection.
fn pod_is_shut_down(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        && pod.metadata.deletion_grace_period_seconds == Some(0)
}

/// Upstream `podUsesPVC`: whether `pod` keeps `claim` in use.
pub fn pod_uses_claim(pod: &Pod, claim: &PersistentVolumeClaim) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    if spec.node_name.as_deref().unwrap_or("").is_empty()
        || pod.metadata.namespace != claim.metadata.namespace
    {
        return false;
    }
    let claim_name = claim.metadata.name.as_deref().unwrap_or("");
    spec.volumes.iter().flatten().any(|v| {
        if let Some(c) = &v.persistent_volume_claim {
            return c.claim_name == claim_name;
        }
        v.ephemeral.is_some()
            && !pod_is_shut_down(pod)
            && ephemeral::volume_claim_name(pod, v) == claim_name
            && ephemeral::volume_is_for_pod(pod, claim).is_ok()
    })
}

/// Upstream `IsPodTerminated` on the pod's own status.
fn pod_is_terminated(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Upstream `enqueuePVCs`' filter: only a pod that is gone, finished or unscheduled
/// can free a claim, so only such pods' claims are worth a look.
fn pod_may_free_claims(pod: &Pod, deleted: bool) -> bool {
    deleted
        || pod_is_terminated(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("")
            .is_empty()
}

/// The PVC protection controller.
pub struct PvcProtectionController {
    client: kube::Client,
    claims: Store<PersistentVolumeClaim>,
    pods: Store<Pod>,
}

impl PvcProtectionController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Result<Arc<Self>> {
        let pods = factory.informer::<Pod>();
        index_pods_by_claim(&pods)?;
        Ok(Arc::new(PvcProtectionController {
            client,
            claims: factory.informer::<PersistentVolumeClaim>().store(),
            pods: pods.store(),
        }))
    }

    /// Upstream `isBeingUsed`: the informer first, then a live list.
    async fn is_in_use(&self, key: &str, claim: &PersistentVolumeClaim) -> Result<bool> {
        let cached = self.pods.by_index(POD_CLAIM_INDEX, key)?;
        if cached.iter().any(|p| pod_uses_claim(p, claim)) {
            return Ok(true);
        }
        let ns = claim.metadata.namespace.as_deref().unwrap_or("");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let live = pods.list(&ListParams::default()).await?;
        Ok(live.items.iter().any(|p| pod_uses_claim(p, claim)))
    }
}

fn enqueue_claims(queue: &WorkQueue<String>, pod: &Pod, deleted: bool) {
    if !pod_may_free_claims(pod, deleted) {
        return;
    }
    let ns = pod.metadata.namespace.as_deref();
    for claim in claims_of(pod) {
        queue.add(key_of(ns, &claim));
    }
}

#[async_trait::async_trait]
impl Controller for PvcProtectionController {
    fn name(&self) -> &'static str {
        "pvcprotection"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory
            .informer::<PersistentVolumeClaim>()
            .add_event_handler(
                move |n: Notification<PersistentVolumeClaim>| {
                    if matches!(n, Notification::Deleted { .. }) {
                        return;
                    }
                    let meta = &n.object().metadata;
                    if needs_finalizer(meta, PVC_PROTECTION_FINALIZER)
                        || is_deletion_candidate(meta, PVC_PROTECTION_FINALIZER)
                    {
                        q.add(object_key(&**n.object()));
                    }
                },
                None,
            );
        let q = queue.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| match n {
                Notification::Added { obj, .. } => enqueue_claims(&q, &obj, false),
                Notification::Updated { old, new } => {
                    enqueue_claims(&q, &new, false);
                    // An update may hide the deletion of one pod and the creation of
                    // another of the same name; the old one's claims may be free now.
                    if old.metadata.uid != new.metadata.uid {
                        enqueue_claims(&q, &old, true);
                    }
                }
                Notification::Deleted { obj, .. } => enqueue_claims(&q, &obj, true),
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let Some(claim) = self.claims.get(key) else {
            return Ok(Action::Done);
        };
        let add = if is_deletion_candidate(&claim.metadata, PVC_PROTECTION_FINALIZER) {
            if self.is_in_use(key, &claim).await? {
                tracing::debug!(claim = key, "keeping the PVC: a pod uses it");
                return Ok(Action::Done);
            }
            false
        } else if needs_finalizer(&claim.metadata, PVC_PROTECTION_FINALIZER) {
            true
        } else {
            return Ok(Action::Done);
        };
        let mut updated = (*claim).clone();
        updated.metadata = with_finalizer(&claim.metadata, PVC_PROTECTION_FINALIZER, add);
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        // A stale cache gives a 409 (resourceVersion): the retry sees the fresh claim.
        done_unless_failed(api.replace(name, &PostParams::default(), &updated).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: Option<&str>, volumes: serde_json::Value) -> Pod {
        let mut v = json!({"metadata": {"name": "web", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "volumes": volumes}});
        if let Some(n) = node {
            v["spec"]["nodeName"] = json!(n);
        }
        serde_json::from_value(v).unwrap()
    }

    fn claim(name: &str, owner_uid: Option<&str>) -> PersistentVolumeClaim {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns"}});
        if let Some(uid) = owner_uid {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
                "name": "web", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn scheduled_pods_use_their_claims() {
        let volumes = json!([
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "cfg", "configMap": {"name": "cfg"}}]);
        assert_eq!(
            claims_of(&pod(None, volumes.clone())),
            ["data", "web-scratch"]
        );
        let bound = pod(Some("node-a"), volumes.clone());
        assert!(pod_uses_claim(&bound, &claim("data", None)));
        assert!(!pod_uses_claim(&bound, &claim("other", None)));
        // The generated claim counts only when the pod owns it.
        assert!(pod_uses_claim(
            &bound,
            &claim("web-scratch", Some("pod-uid"))
        ));
        assert!(!pod_uses_claim(&bound, &claim("web-scratch", Some("x"))));
        // Unscheduled pods never run, so they hold nothing.
        assert!(!pod_uses_claim(
            &pod(None, volumes.clone()),
            &claim("data", None)
        ));
        // A finished pod still holds its claim (as upstream); a shut-down pod frees
        // only its ephemeral claim.
        let mut done = bound.clone();
        done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
        assert!(pod_uses_claim(&done, &claim("data", None)));
        let mut shut = bound.clone();
        shut.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        shut.metadata.deletion_grace_period_seconds = Some(0);
        assert!(!pod_uses_claim(
            &shut,
            &claim("web-scratch", Some("pod-uid"))
        ));
        assert!(pod_uses_claim(&shut, &claim("data", None)));
        // Only pods that may free a claim make the controller look.
        assert!(!pod_may_free_claims(&bound, false));
        assert!(pod_may_free_claims(&bound, true));
        assert!(pod_may_free_claims(&done, false));
        assert!(pod_may_free_claims(&pod(None, volumes), false));
    }

    #[test]
    fn finalizer_decisions() {
        let mut meta = ObjectMeta::default();
        assert!(needs_finalizer(&meta, PVC_PROTECTION_FINALIZER));
        meta = with_finalizer(&meta, PVC_PROTECTION_FINALIZER, true);
        assert_eq!(
            meta.finalizers.as_deref().unwrap(),
            [PVC_PROTECTION_FINALIZER]
        );
        assert!(!needs_finalizer(&meta, PVC_PROTECTION_FINALIZER));
        assert!(!is_deletion_candidate(&meta, PVC_PROTECTION_FINALIZER));
        meta.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        assert!(is_deletion_candidate(&meta, PVC_PROTECTION_FINALIZER));
        meta.finalizers = Some(vec!["a".into(), PVC_PROTECTION_FINALIZER.into()]);
        let removed = with_finalizer(&meta, PVC_PROTECTION_FINALIZER, false);
        assert_eq!(removed.finalizers.as_deref().unwrap(), ["a"]);
        // Being deleted without the finalizer: nothing to add back.
        assert!(!needs_finalizer(&removed, PVC_PROTECTION_FINALIZER));
    }
}
