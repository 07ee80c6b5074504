//! NamespaceAutoProvision (upstream `plugin/pkg/admission/namespace/autoprovision`),
//! off by default: creating an object in a namespace that does not exist creates the
//! namespace first (not on dry runs).

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::{Store, WriteOptions};
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "NamespaceAutoProvision";

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    let namespaces = ferrokube_api::resources::lookup("", "v1", "namespaces")
        .and_then(|info| init.registry.store_for(info))
        .cloned()
        .ok_or("no namespaces store")?;
    Ok(Arc::new(NamespaceAutoProvision { namespaces }))
}

struct NamespaceAutoProvision {
    namespaces: Arc<Store>,
}

#[async_trait]
impl Plugin for NamespaceAutoProvision {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.operation == Operation::Create && !a.namespace.is_empty() && !a.is_core("namespaces")
    }

    async fn admit(
        &self,
        a: &Attributes,
        _object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if a.dry_run
            || super::webhook::fresh_get(&self.namespaces, None, &a.namespace)
                .await?
                .is_some()
        {
            return Ok(());
        }
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": a.namespace}});
        match self
            .namespaces
            .create(None, namespace, &WriteOptions::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code == 409 => Ok(()),
            Err(e) => Err(a.forbidden(e.message)),
        }
    }
}
