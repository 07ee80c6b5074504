//! ExtendedResourceToleration (upstream `plugin/pkg/admission/extendedresourcetoleration`),
//! off by default: a pod requesting an extended resource (`example.com/gpu`) tolerates
//! the `NoSchedule` taint of that name, so nodes with the resource can be tainted to
//! keep other pods off.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "ExtendedResourceToleration";

pub(crate) struct ExtendedResourceToleration;

pub(crate) fn new(_init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(ExtendedResourceToleration))
}

/// Upstream `helper.IsExtendedResourceName`: a qualified name with a domain outside
/// `kubernetes.io`, not a quota `requests.` name.
fn is_extended_resource(name: &str) -> bool {
    let native = match name.split_once('/') {
        None => true,
        Some((domain, _)) => domain == "kubernetes.io" || domain.ends_with(".kubernetes.io"),
    };
    !native
        && !name.starts_with("requests.")
        && ferrokube_apimachinery::validation::is_qualified_name(&format!("requests.{name}"))
            .is_empty()
}

fn add_tolerations(pod: &mut Value) {
    let resources: BTreeSet<String> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod["spec"][*l].as_array())
        .flatten()
        .filter_map(|c| c["resources"]["requests"].as_object())
        .flat_map(|r| r.keys())
        .filter(|k| is_extended_resource(k))
        .cloned()
        .collect();
    if resources.is_empty() {
        return;
    }
    if !pod["spec"]["tolerations"].is_array() {
        pod["spec"]["tolerations"] = json!([]);
    }
    let Some(tolerations) = pod["spec"]["tolerations"].as_array_mut() else {
        return;
    };
    for r in resources {
        let toleration = json!({"key": r, "operator": "Exists", "effect": "NoSchedule"});
        // Upstream `AddOrUpdateTolerationInPod`: one matching toleration is enough.
        let matches = |t: &Value| {
            t["key"] == toleration["key"]
                && t["operator"] == toleration["operator"]
                && t["effect"] == toleration["effect"]
                && t["value"].as_str().unwrap_or("").is_empty()
        };
        if !tolerations.iter().any(matches) {
            tolerations.push(toleration);
        }
    }
}

#[async_trait]
impl Plugin for ExtendedResourceToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_pod_write(&[Operation::Create, Operation::Update])
    }

    async fn admit(
        &self,
        _a: &Attributes,
        pod: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        add_tolerations(pod);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resources_get_tolerations_once() {
        assert!(is_extended_resource("example.com/gpu"));
        assert!(!is_extended_resource("cpu"));
        assert!(!is_extended_resource("kubernetes.io/something"));
        assert!(!is_extended_resource("hugepages-2Mi"));
        let mut pod = json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}}}],
            "initContainers": [{"resources": {"requests": {"example.com/fpga": "1"}}}],
            "tolerations": [{"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}});
        add_tolerations(&mut pod);
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "example.com/fpga", "operator": "Exists", "effect": "NoSchedule"}
            ])
        );
        let mut plain =
            json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}});
        add_tolerations(&mut plain);
        assert!(plain["spec"].get("tolerations").is_none());
    }
}
