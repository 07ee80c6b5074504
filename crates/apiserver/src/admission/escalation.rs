//! RBAC escalation prevention on roles and bindings (upstream
//! `pkg/registry/rbac/*/policybased`): a user may only create or update a role with
//! rules it holds itself, and only bind a role whose rules it holds, unless it has the
//! `escalate` or `bind` verb. Upstream runs this in the RBAC registries, not as an
//! admission plugin, so it cannot be disabled; the chain runs it before the
//! validating plugins.

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::Attributes as AuthzAttributes;
use ferrokube_auth::rbac::{self, RbacSource};
use ferrokube_auth::user::SYSTEM_PRIVILEGED_GROUP;

use crate::authz_webhook::Authorization;
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use serde_json::Value;

use super::{Attributes, Operation};
use crate::security::ClusterState;

pub(crate) const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Whether the escalation check applies to the request.
pub(crate) fn applies(a: &Attributes) -> bool {
    a.resource.group == RBAC_GROUP
        && matches!(a.operation, Operation::Create | Operation::Update)
        && a.subresource.is_empty()
}

/// Whether the user may do `verb` on a role resource by name (the `escalate` and
/// `bind` verbs).
async fn may(
    authorizer: &Authorization,
    a: &Attributes,
    verb: &str,
    resource: &str,
    name: &str,
) -> bool {
    authorizer
        .decide(&AuthzAttributes {
            user: a.user.as_ref().clone(),
            verb: verb.into(),
            namespace: a.namespace.clone(),
            api_group: RBAC_GROUP.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            name: name.into(),
            resource_request: true,
            ..AuthzAttributes::default()
        })
        .await
        .is_allowed()
}

fn rules_of(v: &Value) -> Vec<PolicyRule> {
    v.get("rules")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

/// The check on the final object of a create (`old` None) or update.
pub(crate) async fn check(
    authorizer: &Authorization,
    state: &ClusterState,
    a: &Attributes,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if a.user.in_group(SYSTEM_PRIVILEGED_GROUP) {
        return Ok(());
    }
    let name = new["metadata"]["name"].as_str().unwrap_or("");
    let namespace = a.namespace.as_str();
    let forbidden = |e: &dyn std::fmt::Display| a.forbidden_named(name, e);
    match a.resource.plural {
        "roles" | "clusterroles" => {
            if let Some(old) = old
                && only_gc_fields_changed(new, old)
            {
                return Ok(());
            }
            if may(authorizer, a, "escalate", a.resource.plural, name).await {
                return Ok(());
            }
            let aggregation = &new["aggregationRule"];
            if !aggregation.is_null() && old.is_none_or(|o| o["aggregationRule"] != *aggregation) {
                return Err(forbidden(
                    &"must have cluster-admin privileges to use the aggregationRule",
                ));
            }
            let snapshot = state.snapshot();
            rbac::confirm_no_escalation(&snapshot, &a.user, namespace, &rules_of(new))
                .map_err(|e| forbidden(&e))
        }
        "rolebindings" | "clusterrolebindings" => {
            if let Some(old) = old
                && only_gc_fields_changed(new, old)
            {
                return Ok(());
            }
            let role_ref: RoleRef = serde_json::from_value(new["roleRef"].clone())
                .map_err(|e| ApiError::bad_request(format!("roleRef: {e}")))?;
            let resource = match role_ref.kind.as_str() {
                "Role" => "roles",
                _ => "clusterroles",
            };
            if may(authorizer, a, "bind", resource, &role_ref.name).await {
                return Ok(());
            }
            let snapshot = state.snapshot();
            // Upstream reads the role through the registry: a missing one is its 404.
            let rules = snapshot.role_ref_rules(&role_ref, namespace).map_err(|e| {
                match e.missing_resource() {
                    Some((resource, name)) => ApiError::not_found(RBAC_GROUP, resource, name),
                    None => ApiError::internal(e.registry_message()),
                }
            })?;
            rbac::confirm_no_escalation(&snapshot, &a.user, namespace, &rules)
                .map_err(|e| forbidden(&e))
        }
        _ => Ok(()),
    }
}

/// Upstream `IsOnlyMutatingGCFields`: only finalizers or owner references changed.
fn only_gc_fields_changed(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            for f in [
                "finalizers",
                "ownerReferences",
                "resourceVersion",
                "managedFields",
            ] {
                m.remove(f);
            }
        }
        v
    };
    strip(new) == strip(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gc_only_changes_are_recognised() {
        let a = json!({"metadata": {"name": "r", "finalizers": ["x"]}, "rules": []});
        let b = json!({"metadata": {"name": "r"}, "rules": []});
        assert!(only_gc_fields_changed(&a, &b));
        let c = json!({"metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}]});
        assert!(!only_gc_fields_changed(&c, &b));
    }
}
