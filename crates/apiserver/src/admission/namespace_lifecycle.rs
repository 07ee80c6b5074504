//! NamespaceLifecycle (upstream `k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle`)
//! for what the store does not enforce: the namespaces `default`, `kube-system` and
//! `kube-public` may not be deleted (403 `this namespace may not be deleted`). The
//! rest of the plugin (no new objects in a missing or terminating namespace) the store
//! checks on every write, whatever the plugin list.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::Value;

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "NamespaceLifecycle";

/// Upstream's `immortalNamespaces`.
const IMMORTAL: [&str; 3] = ["default", "kube-system", "kube-public"];

pub(crate) struct NamespaceLifecycle;

pub(crate) fn new(_: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NamespaceLifecycle))
}

#[async_trait]
impl Plugin for NamespaceLifecycle {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.operation == Operation::Delete && a.is_core("namespaces") && a.subresource.is_empty()
    }

    // Upstream refuses in its mutating step, which for a delete runs right before
    // validation; here a delete has only the validating one.
    async fn validate(
        &self,
        a: &Attributes,
        _object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if IMMORTAL.contains(&a.name.as_str()) {
            return Err(a.forbidden("this namespace may not be deleted"));
        }
        Ok(())
    }
}
