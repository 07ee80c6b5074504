//! Upstream `controller.RealPodControl`: how the ReplicaSet, DaemonSet and Job
//! controllers create and delete their pods, with the owner's events
//! (`SuccessfulCreate` "Created pod: NAME", `FailedCreate` "Error creating: ERR",
//! `SuccessfulDelete` "Deleted pod: NAME", `FailedDelete` "Error deleting: ERR"), one
//! per pod as `kubectl describe` shows upstream.

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use crate::events::{EventSink, EventType, emit_ref};
use crate::replicaset::is_not_found;

/// Whether the create failed because the namespace is being deleted: no event then,
/// as upstream's, since the namespace's deletion will remove the owner too.
pub fn is_namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s)
        if s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// Creates `pod` and tells `owner`'s events how it went.
pub async fn create_pod(
    api: &Api<Pod>,
    pod: &Pod,
    events: &dyn EventSink,
    owner: &ObjectReference,
) -> kube::Result<Pod> {
    match api.create(&PostParams::default(), pod).await {
        Ok(created) => {
            let name = created.metadata.name.as_deref().unwrap_or_default();
            emit_ref(
                events,
                owner.clone(),
                EventType::Normal,
                "SuccessfulCreate",
                format!("Created pod: {name}"),
            );
            Ok(created)
        }
        Err(e) => {
            if !is_namespace_terminating(&e) {
                emit_ref(
                    events,
                    owner.clone(),
                    EventType::Warning,
                    "FailedCreate",
                    format!("Error creating: {}", ferrokube_client::error_message(&e)),
                );
            }
            Err(e)
        }
    }
}

/// Deletes the pod `name` and tells `owner`'s events how it went; a pod already gone
/// is an error for the caller (its expectations) but no event.
pub async fn delete_pod(
    api: &Api<Pod>,
    name: &str,
    events: &dyn EventSink,
    owner: &ObjectReference,
) -> kube::Result<()> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            emit_ref(
                events,
                owner.clone(),
                EventType::Normal,
                "SuccessfulDelete",
                format!("Deleted pod: {name}"),
            );
            Ok(())
        }
        Err(e) => {
            if !is_not_found(&e) {
                emit_ref(
                    events,
                    owner.clone(),
                    EventType::Warning,
                    "FailedDelete",
                    format!("Error deleting: {}", ferrokube_client::error_message(&e)),
                );
            }
            Err(e)
        }
    }
}
