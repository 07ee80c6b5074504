//! PersistentVolumeClaimResize (upstream `plugin/pkg/admission/storage/
//! persistentvolume/resize`), validating, on PVC update: a claim may grow its
//! storage request only when it is Bound and its StorageClass (unchanged) sets
//! `allowVolumeExpansion: true`. Shrinking is refused by validation, not here.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::quantity;
use ferrokube_registry::Store;
use serde_json::Value;

use super::default_storage_class::{BETA_CLASS_ANNOTATION, storage_classes};
use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "PersistentVolumeClaimResize";

pub(crate) struct PersistentVolumeClaimResize {
    classes: Arc<Store>,
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(PersistentVolumeClaimResize {
        classes: storage_classes(init)?,
    }))
}

/// Upstream `helper.GetPersistentVolumeClaimClass`: the beta annotation, then
/// `spec.storageClassName`.
fn claim_class(claim: &Value) -> &str {
    claim["metadata"]["annotations"][BETA_CLASS_ANNOTATION]
        .as_str()
        .or_else(|| claim["spec"]["storageClassName"].as_str())
        .unwrap_or("")
}

fn requested_storage(claim: &Value) -> i128 {
    claim["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(quantity::milli)
        .unwrap_or(0)
}

/// The plugin's pure logic, with the StorageClass lookup given; the error is the
/// 403 reason.
pub(crate) fn check_resize<'a>(
    claim: &Value,
    old: &Value,
    class: impl Fn(&str) -> Option<&'a Value>,
) -> Result<(), String> {
    if requested_storage(claim) <= requested_storage(old) {
        return Ok(());
    }
    if old["status"]["phase"].as_str() != Some("Bound") {
        return Err("Only bound persistent volume claims can be expanded".into());
    }
    let (name, old_name) = (claim_class(claim), claim_class(old));
    let allowed = !name.is_empty()
        && name == old_name
        && class(name).and_then(|c| c["allowVolumeExpansion"].as_bool()) == Some(true);
    if !allowed {
        return Err("only dynamically provisioned pvc can be resized and \
             the storageclass that provisions the pvc must support resize"
            .into());
    }
    Ok(())
}

#[async_trait]
impl Plugin for PersistentVolumeClaimResize {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_core("persistentvolumeclaims")
            && a.subresource.is_empty()
            && a.operation == Operation::Update
    }

    async fn validate(
        &self,
        a: &Attributes,
        claim: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let (Some(claim), Some(old)) = (claim, old) else {
            return Ok(());
        };
        let classes = crate::security::cached(&self.classes, "");
        let lookup = |name: &str| {
            classes
                .iter()
                .map(|c| c.as_ref())
                .find(|c| c["metadata"]["name"].as_str() == Some(name))
        };
        check_resize(claim, old, lookup).map_err(|e| a.forbidden(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(class: &str, size: &str, phase: &str) -> Value {
        json!({"spec": {"storageClassName": class,
            "resources": {"requests": {"storage": size}}}, "status": {"phase": phase}})
    }

    #[test]
    fn growth_needs_a_bound_claim_and_an_expandable_class() {
        let expandable = json!({"metadata": {"name": "fast"}, "allowVolumeExpansion": true});
        let fixed = json!({"metadata": {"name": "fixed"}});
        let lookup = |n: &str| match n {
            "fast" => Some(&expandable),
            "fixed" => Some(&fixed),
            _ => None,
        };
        let bound = claim("fast", "1Gi", "Bound");
        check_resize(&claim("fast", "2Gi", "Bound"), &bound, lookup).unwrap();
        // Same size or smaller: not this plugin's business.
        check_resize(
            &claim("fixed", "1Gi", "Bound"),
            &claim("fixed", "1Gi", "Bound"),
            lookup,
        )
        .unwrap();
        assert_eq!(
            check_resize(
                &claim("fast", "2Gi", "Pending"),
                &claim("fast", "1Gi", "Pending"),
                lookup
            )
            .unwrap_err(),
            "Only bound persistent volume claims can be expanded"
        );
        let e = check_resize(
            &claim("fixed", "2Gi", "Bound"),
            &claim("fixed", "1Gi", "Bound"),
            lookup,
        )
        .unwrap_err();
        assert!(
            e.starts_with("only dynamically provisioned pvc can be resized"),
            "{e}"
        );
        assert!(
            check_resize(
                &claim("gone", "2Gi", "Bound"),
                &claim("gone", "1Gi", "Bound"),
                lookup
            )
            .is_err()
        );
        assert!(
            check_resize(
                &claim("", "2Gi", "Bound"),
                &claim("", "1Gi", "Bound"),
                lookup
            )
            .is_err()
        );
    }
}
