//! LimitPodHardAntiAffinityTopology (upstream `plugin/pkg/admission/antiaffinity`),
//! off by default: a pod's required anti-affinity terms may only use the
//! `kubernetes.io/hostname` topology key, so that no pod can keep a whole zone or
//! region to itself.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::Value;

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "LimitPodHardAntiAffinityTopology";

const HOSTNAME_KEY: &str = "kubernetes.io/hostname";

pub(crate) fn new(_init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(LimitPodHardAntiAffinityTopology))
}

struct LimitPodHardAntiAffinityTopology;

/// The first required anti-affinity term's topology key that is not the hostname.
fn other_topology_key(pod: &Value) -> Option<&str> {
    pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|term| term["topologyKey"].as_str().unwrap_or_default())
        .find(|key| *key != HOSTNAME_KEY)
}

#[async_trait]
impl Plugin for LimitPodHardAntiAffinityTopology {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_pod_write(&[Operation::Create, Operation::Update])
    }

    async fn validate(
        &self,
        a: &Attributes,
        pod: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        match pod.and_then(other_topology_key) {
            // Upstream names the pod from its object (empty for a generated name).
            Some(key) => Err(a.forbidden_named(
                super::name_of(pod.unwrap_or(&Value::Null)),
                format!(
                    "affinity.PodAntiAffinity.RequiredDuringScheduling has TopologyKey {key} but only key {HOSTNAME_KEY} is allowed"
                ),
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_hostname_terms_pass() {
        let pod = |keys: &[&str]| {
            let terms: Vec<Value> = keys
                .iter()
                .map(|k| json!({"labelSelector": {}, "topologyKey": k}))
                .collect();
            json!({"spec": {"affinity": {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": terms,
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone"}}]}}}})
        };
        assert_eq!(other_topology_key(&pod(&[])), None);
        assert_eq!(other_topology_key(&pod(&[HOSTNAME_KEY])), None);
        assert_eq!(
            other_topology_key(&pod(&[HOSTNAME_KEY, "topology.kubernetes.io/zone"])),
            Some("topology.kubernetes.io/zone")
        );
        assert_eq!(other_topology_key(&json!({"spec": {}})), None);
    }
}
