//! DenyServiceExternalIPs (upstream `plugin/pkg/admission/network/denyserviceexternalips`),
//! validating, off by default: no new `spec.externalIPs` on Services (CVE-2020-8554).
//! An update may keep or drop the addresses a Service already has.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use serde_json::Value;

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "DenyServiceExternalIPs";

pub(crate) struct DenyServiceExternalIps;

pub(crate) fn new(_init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(DenyServiceExternalIps))
}

/// Upstream `isSubset`: every external IP of the new Service was already the old one's.
fn keeps_only_old_ips(new: &Value, old: Option<&Value>) -> bool {
    let ips = |svc: &Value| -> Vec<String> {
        svc["spec"]["externalIPs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let new_ips = ips(new);
    if new_ips.is_empty() {
        return true;
    }
    let Some(old) = old else {
        return false;
    };
    let old_ips = ips(old);
    new_ips.iter().all(|ip| old_ips.contains(ip))
}

#[async_trait]
impl Plugin for DenyServiceExternalIps {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_core("services")
            && a.subresource.is_empty()
            && matches!(a.operation, Operation::Create | Operation::Update)
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        match object {
            Some(new) if !keeps_only_old_ips(new, old) => {
                Err(a.forbidden("use of external IPs is denied by admission control"))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_addresses_the_service_had_are_allowed() {
        let svc = |ips: &[&str]| json!({"spec": {"externalIPs": ips}});
        assert!(keeps_only_old_ips(&json!({"spec": {}}), None));
        assert!(!keeps_only_old_ips(&svc(&["1.2.3.4"]), None));
        assert!(keeps_only_old_ips(
            &svc(&["1.2.3.4"]),
            Some(&svc(&["1.2.3.4", "5.6.7.8"]))
        ));
        assert!(!keeps_only_old_ips(
            &svc(&["1.2.3.4", "9.9.9.9"]),
            Some(&svc(&["1.2.3.4"]))
        ));
    }
}
