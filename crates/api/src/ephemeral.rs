//! Generic ephemeral volumes (upstream `k8s.io/component-helpers/storage/ephemeral`):
//! a pod's `volumes[].ephemeral` is served by a PersistentVolumeClaim the
//! ephemeral-volume controller creates from its `volumeClaimTemplate`, named
//! `<pod>-<volume>` and controlled by the pod. Everyone who follows such a volume to its
//! claim (the controller, the scheduler's VolumeBinding, the kubelet, PVC protection)
//! names it with [`volume_claim_name`] and must check [`volume_is_for_pod`] before use:
//! the name is predictable, so a claim of that name may have been made by someone else.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Volume};

/// Upstream `VolumeClaimName`: the claim generated for the pod's ephemeral volume.
pub fn volume_claim_name(pod: &Pod, volume: &Volume) -> String {
    format!(
        "{}-{}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        volume.name
    )
}

/// The claim a pod volume is served by, and whether it is an ephemeral volume's
/// generated claim (which must then pass [`volume_is_for_pod`]); `None` for volumes
/// that use no claim.
pub fn claim_of_volume(pod: &Pod, volume: &Volume) -> Option<(String, bool)> {
    if let Some(c) = &volume.persistent_volume_claim {
        Some((c.claim_name.clone(), false))
    } else if volume.ephemeral.is_some() {
        Some((volume_claim_name(pod, volume), true))
    } else {
        None
    }
}

/// Upstream `VolumeIsForPod`: the claim is in the pod's namespace and its controller
/// (the first owner reference marked `controller`, as `metav1.GetControllerOf`) is the
/// pod. The error is upstream's message, complete in itself.
pub fn volume_is_for_pod(pod: &Pod, pvc: &PersistentVolumeClaim) -> Result<(), String> {
    let controller_uid = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str());
    // A pod not read from the API has no uid and controls nothing.
    let controlled = pod
        .metadata
        .uid
        .as_deref()
        .is_some_and(|uid| !uid.is_empty() && controller_uid == Some(uid));
    if pvc.metadata.namespace != pod.metadata.namespace || !controlled {
        return Err(format!(
            "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
            pvc.metadata.namespace.as_deref().unwrap_or_default(),
            pvc.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "volumes": [
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "tmp", "emptyDir": {}}]}
        }))
        .unwrap()
    }

    fn claim(ns: &str, owners: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "web-scratch", "namespace": ns, "ownerReferences": owners}
        }))
        .unwrap()
    }

    #[test]
    fn volumes_name_their_claims() {
        let p = pod();
        let vols = p.spec.as_ref().unwrap().volumes.as_ref().unwrap();
        assert_eq!(volume_claim_name(&p, &vols[0]), "web-scratch");
        let of: Vec<_> = vols.iter().map(|v| claim_of_volume(&p, v)).collect();
        assert_eq!(
            of,
            [
                Some(("web-scratch".to_string(), true)),
                Some(("data".to_string(), false)),
                None
            ]
        );
    }

    #[test]
    fn only_a_claim_the_pod_controls_is_its_ephemeral_volume() {
        let p = pod();
        let owner = |uid: &str, controller: bool| {
            json!({"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid,
                   "controller": controller})
        };
        assert_eq!(
            volume_is_for_pod(&p, &claim("ns", json!([owner("pod-uid", true)]))),
            Ok(())
        );
        let refused = "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)";
        // Owned but not controlled, controlled by another object, not owned at all.
        for owners in [
            json!([owner("pod-uid", false)]),
            json!([owner("other", true), owner("pod-uid", true)]),
            json!(null),
        ] {
            assert_eq!(
                volume_is_for_pod(&p, &claim("ns", owners)),
                Err(refused.to_string())
            );
        }
        assert_eq!(
            volume_is_for_pod(&p, &claim("elsewhere", json!([owner("pod-uid", true)]))),
            Err(
                "PVC elsewhere/web-scratch was not created for pod ns/web (pod is not owner)"
                    .to_string()
            )
        );
        // A pod without a uid (not from the API) controls nothing.
        let mut anon = p.clone();
        anon.metadata.uid = None;
        assert!(volume_is_for_pod(&anon, &claim("ns", json!([owner("", true)]))).is_err());
    }
}
