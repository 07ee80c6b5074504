//! DefaultStorageClass (upstream `plugin/pkg/admission/storage/storageclass/
//! setdefault`), mutating, on PVC creation: a claim that names no class (neither
//! `spec.storageClassName` nor the beta annotation) gets the default StorageClass,
//! the one annotated `storageclass.kubernetes.io/is-default-class: "true"` (the
//! newest, then the first by name, when several are).

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::Store;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "DefaultStorageClass";
/// Upstream `v1.BetaStorageClassAnnotation`: the class before `storageClassName`.
pub(crate) const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
const DEFAULT_ANNOTATIONS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];

/// A plugin that gives a new object of one resource its default class
/// (DefaultStorageClass, DefaultIngressClass): the classes from their watch cache, the
/// resource's own rule in `set`.
pub(crate) struct DefaultClass {
    pub name: &'static str,
    pub group: &'static str,
    pub plural: &'static str,
    pub classes: Arc<Store>,
    pub set: fn(&mut Value, &[Arc<Value>]),
}

pub(crate) fn storage_classes(init: &PluginInit<'_>) -> Result<Arc<Store>, String> {
    init.registry
        .store("storage.k8s.io", "v1", "storageclasses")
        .cloned()
        .ok_or_else(|| "no storageclasses store".to_string())
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(DefaultClass {
        name: NAME,
        group: "",
        plural: "persistentvolumeclaims",
        classes: storage_classes(init)?,
        set: set_default_class,
    }))
}

/// Upstream `storageutil.GetDefaultClass`: among the classes marked default, the
/// newest, then the first by name.
pub(crate) fn default_class(classes: &[Arc<Value>]) -> Option<&Value> {
    newest_marked_default(classes, &DEFAULT_ANNOTATIONS)
}

/// Among `classes` annotated `"true"` with one of `annotations`, the newest, then the
/// first by name (the default StorageClass's and IngressClass's rule upstream).
pub(crate) fn newest_marked_default<'a>(
    classes: &'a [Arc<Value>],
    annotations: &[&str],
) -> Option<&'a Value> {
    let is_default = |c: &Value| {
        annotations
            .iter()
            .any(|a| c["metadata"]["annotations"][*a].as_str() == Some("true"))
    };
    let created = |c: &Value| {
        c["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let name = |c: &Value| c["metadata"]["name"].as_str().unwrap_or("").to_string();
    classes
        .iter()
        .map(|c| c.as_ref())
        .filter(|c| is_default(c))
        // RFC 3339 UTC timestamps of one format sort as strings do.
        .min_by(|a, b| created(b).cmp(&created(a)).then(name(a).cmp(&name(b))))
}

/// Upstream `helper.PersistentVolumeClaimHasClass`.
pub(crate) fn claim_has_class(claim: &Value) -> bool {
    !claim["spec"]["storageClassName"].is_null()
        || claim["metadata"]["annotations"]
            .get(BETA_CLASS_ANNOTATION)
            .is_some()
}

/// The plugin's pure logic.
pub(crate) fn set_default_class(claim: &mut Value, classes: &[Arc<Value>]) {
    if claim_has_class(claim) {
        return;
    }
    if let Some(class) = default_class(classes) {
        if !claim["spec"].is_object() {
            claim["spec"] = json!({});
        }
        claim["spec"]["storageClassName"] = class["metadata"]["name"].clone();
    }
}

#[async_trait]
impl Plugin for DefaultClass {
    fn name(&self) -> &'static str {
        self.name
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is(self.group, self.plural)
            && a.subresource.is_empty()
            && a.operation == Operation::Create
    }

    async fn admit(
        &self,
        _a: &Attributes,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let classes = crate::security::cached(&self.classes, "");
        (self.set)(object, &classes);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, created: &str, default: Option<&str>) -> Arc<Value> {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if let Some(v) = default {
            c["metadata"]["annotations"] = json!({DEFAULT_ANNOTATIONS[0]: v});
        }
        Arc::new(c)
    }

    #[test]
    fn newest_default_then_name() {
        let classes = [
            class("old", "2024-01-01T00:00:00Z", Some("true")),
            class("b", "2025-01-01T00:00:00Z", Some("true")),
            class("a", "2025-01-01T00:00:00Z", Some("true")),
            class("newest", "2026-01-01T00:00:00Z", Some("false")),
            class("plain", "2026-01-01T00:00:00Z", None),
        ];
        assert_eq!(default_class(&classes).unwrap()["metadata"]["name"], "a");
        assert!(default_class(&classes[3..]).is_none());
    }

    #[test]
    fn only_claims_without_a_class_get_it() {
        let classes = [class("fast", "2025-01-01T00:00:00Z", Some("true"))];
        let mut bare = json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}});
        set_default_class(&mut bare, &classes);
        assert_eq!(bare["spec"]["storageClassName"], "fast");
        // An empty name asks for no class at all.
        let mut none = json!({"spec": {"storageClassName": ""}});
        set_default_class(&mut none, &classes);
        assert_eq!(none["spec"]["storageClassName"], "");
        let mut beta = json!({"metadata": {"annotations": {BETA_CLASS_ANNOTATION: "slow"}},
            "spec": {}});
        set_default_class(&mut beta, &classes);
        assert!(beta["spec"].get("storageClassName").is_none());
        let mut no_default = json!({"spec": {}});
        set_default_class(&mut no_default, &[]);
        assert!(no_default["spec"].get("storageClassName").is_none());
    }
}
