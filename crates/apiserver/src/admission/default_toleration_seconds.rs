//! DefaultTolerationSeconds (upstream `plugin/pkg/admission/defaulttolerationseconds`),
//! mutating, on pod create and update: a pod that does not tolerate the
//! `node.kubernetes.io/not-ready` or `node.kubernetes.io/unreachable` NoExecute taints
//! gets a toleration of each for `--default-not-ready-toleration-seconds` /
//! `--default-unreachable-toleration-seconds` (300 s), so taint-based eviction
//! removes it five minutes after its node fails.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "DefaultTolerationSeconds";
const NOT_READY: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

pub(crate) struct DefaultTolerationSeconds {
    not_ready_seconds: i64,
    unreachable_seconds: i64,
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(DefaultTolerationSeconds {
        not_ready_seconds: init.options.default_not_ready_toleration_seconds,
        unreachable_seconds: init.options.default_unreachable_toleration_seconds,
    }))
}

/// Whether a toleration covers the NoExecute taint `key` (an empty key or effect
/// matches any).
fn tolerates(t: &Value, key: &str) -> bool {
    let k = t["key"].as_str().unwrap_or("");
    let effect = t["effect"].as_str().unwrap_or("");
    (k == key || k.is_empty()) && (effect == "NoExecute" || effect.is_empty())
}

/// The plugin's pure logic.
pub(crate) fn add_tolerations(pod: &mut Value, not_ready_seconds: i64, unreachable_seconds: i64) {
    let current: Vec<Value> = pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut added = Vec::new();
    for (key, seconds) in [
        (NOT_READY, not_ready_seconds),
        (UNREACHABLE, unreachable_seconds),
    ] {
        if !current.iter().any(|t| tolerates(t, key)) {
            added.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": seconds}),
            );
        }
    }
    if added.is_empty() {
        return;
    }
    let mut all = current;
    all.extend(added);
    pod["spec"]["tolerations"] = Value::Array(all);
}

#[async_trait]
impl Plugin for DefaultTolerationSeconds {
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
        if pod["spec"].is_object() {
            add_tolerations(pod, self.not_ready_seconds, self.unreachable_seconds);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_what_the_pod_does_not_tolerate() {
        let mut pod = json!({"spec": {"containers": []}});
        add_tolerations(&mut pod, 300, 200);
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 200}
            ])
        );
        // Idempotent on update.
        let before = pod.clone();
        add_tolerations(&mut pod, 300, 200);
        assert_eq!(pod, before);
        let mut own = json!({"spec": {"tolerations": [
            {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]}});
        add_tolerations(&mut own, 300, 300);
        let t = own["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["tolerationSeconds"], 5);
        assert_eq!(t[1]["key"], UNREACHABLE);
        // An empty key and effect tolerate everything.
        let mut all = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        add_tolerations(&mut all, 300, 300);
        assert_eq!(all["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }
}
