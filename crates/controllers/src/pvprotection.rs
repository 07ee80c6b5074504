//! The PV protection controller (upstream `pkg/controller/volume/pvprotection`): a
//! PersistentVolume being deleted keeps its `kubernetes.io/pv-protection` finalizer
//! (put on by the StorageObjectInUseProtection admission plugin) while it is Bound to
//! a claim (`status.phase`); the controller removes the finalizer once it is not, and
//! adds it to volumes that miss it.
//!
//! Pure part: [`is_in_use`] (with pvcprotection's finalizer helpers).

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, PostParams};

use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::pvcprotection::{is_deletion_candidate, needs_finalizer, with_finalizer};
use crate::{Action, Controller, Result, done_unless_failed, enqueue_live};

/// Upstream `volumeutil.PVProtectionFinalizer`.
pub const PV_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-protection";

/// Upstream `isBeingUsed`: the volume is Bound (the PV controller's status).
pub fn is_in_use(volume: &PersistentVolume) -> bool {
    volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// The PV protection controller.
pub struct PvProtectionController {
    client: kube::Client,
    volumes: Store<PersistentVolume>,
}

impl PvProtectionController {
    pub fn new(factory: &SharedInformerFactory, client: kube::Client) -> Arc<Self> {
        Arc::new(PvProtectionController {
            client,
            volumes: factory.informer::<PersistentVolume>().store(),
        })
    }
}

#[async_trait::async_trait]
impl Controller for PvProtectionController {
    fn name(&self) -> &'static str {
        "pvprotection"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        enqueue_live(factory, queue, |pv: &PersistentVolume| {
            needs_finalizer(&pv.metadata, PV_PROTECTION_FINALIZER)
                || is_deletion_candidate(&pv.metadata, PV_PROTECTION_FINALIZER)
        });
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let Some(volume) = self.volumes.get(key) else {
            return Ok(Action::Done);
        };
        let add = if is_deletion_candidate(&volume.metadata, PV_PROTECTION_FINALIZER) {
            if is_in_use(&volume) {
                tracing::debug!(volume = key, "keeping the PV: it is Bound");
                return Ok(Action::Done);
            }
            false
        } else if needs_finalizer(&volume.metadata, PV_PROTECTION_FINALIZER) {
            true
        } else {
            return Ok(Action::Done);
        };
        let mut updated = (*volume).clone();
        updated.metadata = with_finalizer(&volume.metadata, PV_PROTECTION_FINALIZER, add);
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        // A stale cache gives a 409 (resourceVersion): the retry sees the fresh volume.
        done_unless_failed(api.replace(key, &PostParams::default(), &updated).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_bound_volumes_are_in_use() {
        let pv = |phase: Option<&str>| -> PersistentVolume {
            let mut v = json!({"metadata": {"name": "pv"}});
            if let Some(p) = phase {
                v["status"] = json!({"phase": p});
            }
            serde_json::from_value(v).unwrap()
        };
        assert!(is_in_use(&pv(Some("Bound"))));
        for phase in [None, Some("Available"), Some("Released"), Some("Failed")] {
            assert!(!is_in_use(&pv(phase)), "{phase:?}");
        }
    }
}
