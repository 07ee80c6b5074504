//! StorageObjectInUseProtection (upstream `plugin/pkg/admission/storage/
//! storageobjectinuseprotection`), mutating, on creation: a new PersistentVolumeClaim
//! gets the `kubernetes.io/pvc-protection` finalizer and a new PersistentVolume the
//! `kubernetes.io/pv-protection` one, so deleting them waits for the controller
//! manager's pvc-protection / pv-protection controllers to see them unused.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "StorageObjectInUseProtection";
/// Upstream `volumeutil.PVCProtectionFinalizer`.
pub(crate) const PVC_FINALIZER: &str = "kubernetes.io/pvc-protection";
/// Upstream `volumeutil.PVProtectionFinalizer`.
pub(crate) const PV_FINALIZER: &str = "kubernetes.io/pv-protection";

pub(crate) struct StorageObjectInUseProtection;

pub(crate) fn new(_init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(StorageObjectInUseProtection))
}

/// Appends `finalizer` to the object's `metadata.finalizers` unless it is there.
pub(crate) fn add_finalizer(object: &mut Value, finalizer: &str) {
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let finalizers = &mut object["metadata"]["finalizers"];
    if !finalizers.is_array() {
        *finalizers = json!([]);
    }
    let Some(list) = finalizers.as_array_mut() else {
        return;
    };
    if !list.iter().any(|f| f.as_str() == Some(finalizer)) {
        list.push(json!(finalizer));
    }
}

#[async_trait]
impl Plugin for StorageObjectInUseProtection {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        (a.is_core("persistentvolumeclaims") || a.is_core("persistentvolumes"))
            && a.subresource.is_empty()
            && a.operation == Operation::Create
    }

    async fn admit(
        &self,
        a: &Attributes,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let finalizer = if a.is_core("persistentvolumes") {
            PV_FINALIZER
        } else {
            PVC_FINALIZER
        };
        add_finalizer(object, finalizer);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_the_finalizer_once_and_keeps_others() {
        let mut bare = json!({"spec": {}});
        add_finalizer(&mut bare, PVC_FINALIZER);
        assert_eq!(bare["metadata"]["finalizers"], json!([PVC_FINALIZER]));
        let before = bare.clone();
        add_finalizer(&mut bare, PVC_FINALIZER);
        assert_eq!(bare, before);

        let mut own = json!({"metadata": {"name": "pv", "finalizers": ["example.com/x"]}});
        add_finalizer(&mut own, PV_FINALIZER);
        assert_eq!(
            own["metadata"]["finalizers"],
            json!(["example.com/x", PV_FINALIZER])
        );
    }
}
