//! TaintNodesByCondition (upstream `plugin/pkg/admission/nodetaint`), mutating, on
//! node creation: a new Node gets the `node.kubernetes.io/not-ready:NoSchedule`
//! taint, so nothing is scheduled onto it before it reports Ready; the node
//! lifecycle controller removes the taint once the kubelet says it is Ready.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "TaintNodesByCondition";
const NOT_READY: &str = "node.kubernetes.io/not-ready";

pub(crate) struct TaintNodesByCondition;

pub(crate) fn new(_init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(TaintNodesByCondition))
}

/// Upstream `addNotReadyTaint`: adds the taint unless one with the same key and
/// effect is there (upstream `Taint.MatchTaint`).
pub(crate) fn add_not_ready_taint(node: &mut Value) {
    if !node["spec"].is_object() {
        node["spec"] = json!({});
    }
    let taints = &mut node["spec"]["taints"];
    if !taints.is_array() {
        *taints = json!([]);
    }
    let Some(list) = taints.as_array_mut() else {
        return;
    };
    let present = list.iter().any(|t| {
        t["key"].as_str() == Some(NOT_READY) && t["effect"].as_str() == Some("NoSchedule")
    });
    if !present {
        list.push(json!({"key": NOT_READY, "effect": "NoSchedule"}));
    }
}

#[async_trait]
impl Plugin for TaintNodesByCondition {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_core("nodes") && a.subresource.is_empty() && a.operation == Operation::Create
    }

    async fn admit(
        &self,
        _a: &Attributes,
        node: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        add_not_ready_taint(node);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_the_taint_once_and_keeps_others() {
        let mut bare = json!({"metadata": {"name": "n"}});
        add_not_ready_taint(&mut bare);
        assert_eq!(
            bare["spec"]["taints"],
            json!([{"key": NOT_READY, "effect": "NoSchedule"}])
        );
        let before = bare.clone();
        add_not_ready_taint(&mut bare);
        assert_eq!(bare, before);

        let mut own = json!({"spec": {"taints": [
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": NOT_READY, "effect": "NoExecute"}]}});
        add_not_ready_taint(&mut own);
        let taints = own["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 3);
        assert_eq!(taints[2], json!({"key": NOT_READY, "effect": "NoSchedule"}));
    }
}
