//! DefaultIngressClass (upstream `plugin/pkg/admission/network/defaultingressclass`),
//! mutating, on Ingress creation: an Ingress that names no class (neither
//! `spec.ingressClassName` nor the `kubernetes.io/ingress.class` annotation) gets the
//! default IngressClass, the one annotated
//! `ingressclass.kubernetes.io/is-default-class: "true"` (the newest, then the first
//! by name, when several are).

use std::sync::Arc;

use serde_json::{Value, json};

use super::default_storage_class::{DefaultClass, newest_marked_default};
use super::{Plugin, PluginInit};

pub(crate) const NAME: &str = "DefaultIngressClass";
/// Upstream `networkingv1beta1.AnnotationIngressClass`: the class before the field.
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
const DEFAULT_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    let classes = init
        .registry
        .store("networking.k8s.io", "v1", "ingressclasses")
        .cloned()
        .ok_or_else(|| "no ingressclasses store".to_string())?;
    Ok(Arc::new(DefaultClass {
        name: NAME,
        group: "networking.k8s.io",
        plural: "ingresses",
        classes,
        set: set_default_class,
    }))
}

/// The plugin's pure logic.
fn set_default_class(ingress: &mut Value, classes: &[Arc<Value>]) {
    let has_class = !ingress["spec"]["ingressClassName"].is_null()
        || ingress["metadata"]["annotations"]
            .get(CLASS_ANNOTATION)
            .is_some();
    if has_class {
        return;
    }
    if let Some(class) = newest_marked_default(classes, &[DEFAULT_ANNOTATION]) {
        if !ingress["spec"].is_object() {
            ingress["spec"] = json!({});
        }
        ingress["spec"]["ingressClassName"] = class["metadata"]["name"].clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, created: &str, default: Option<&str>) -> Arc<Value> {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if let Some(v) = default {
            c["metadata"]["annotations"] = json!({DEFAULT_ANNOTATION: v});
        }
        Arc::new(c)
    }

    #[test]
    fn an_ingress_without_a_class_gets_the_newest_default() {
        let classes = [
            class("old", "2026-01-01T00:00:00Z", Some("true")),
            class("new", "2026-02-01T00:00:00Z", Some("true")),
            class("newer-not-default", "2026-03-01T00:00:00Z", Some("false")),
        ];
        let mut ing = json!({"metadata": {"name": "i"}, "spec": {}});
        set_default_class(&mut ing, &classes);
        assert_eq!(ing["spec"]["ingressClassName"], "new");

        // A class named either way is kept.
        let mut named = json!({"metadata": {"name": "i"}, "spec": {"ingressClassName": "x"}});
        set_default_class(&mut named, &classes);
        assert_eq!(named["spec"]["ingressClassName"], "x");
        let mut annotated = json!({"metadata": {"name": "i",
            "annotations": {CLASS_ANNOTATION: "nginx"}}, "spec": {}});
        set_default_class(&mut annotated, &classes);
        assert!(annotated["spec"].get("ingressClassName").is_none());

        // No default: nothing set.
        let mut ing = json!({"metadata": {"name": "i"}});
        set_default_class(&mut ing, &classes[2..]);
        assert!(ing.get("spec").is_none());
    }
}
