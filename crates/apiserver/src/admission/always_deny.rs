//! AlwaysDeny (upstream `plugin/pkg/admission/deny`), off by default and meant for
//! testing only: every write and connect request is refused, in both steps.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::Value;

use super::{Attributes, Plugin, PluginInit};

pub(crate) const NAME: &str = "AlwaysDeny";

const DENIAL: &str = "admission control is denying all modifications";

pub(crate) fn new(_init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    tracing::warn!(
        "{NAME} admission controller is deprecated. Please remove this controller from your configuration files and scripts."
    );
    Ok(Arc::new(AlwaysDeny))
}

struct AlwaysDeny;

#[async_trait]
impl Plugin for AlwaysDeny {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, _a: &Attributes) -> bool {
        true
    }

    async fn admit(
        &self,
        a: &Attributes,
        _object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Err(a.forbidden(DENIAL))
    }

    async fn validate(
        &self,
        a: &Attributes,
        _object: Option<&Value>,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Err(a.forbidden(DENIAL))
    }
}
