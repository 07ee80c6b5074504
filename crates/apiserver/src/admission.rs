//! Write-time checks that need the requesting user: RBAC escalation prevention on
//! roles and bindings (upstream `pkg/registry/rbac/*/policybased`) and the
//! NodeRestriction admission plugin (`plugin/pkg/admission/noderestriction`).
//! The registry runs the returned [`Admit`] on the final object of a create or
//! update; deletes are checked here before the store is called.

use std::sync::Arc;

use ferrokube_api::resources::ResourceInfo;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::node::node_identity;
use ferrokube_auth::rbac::{self, RbacSource};
use ferrokube_auth::user::SYSTEM_PRIVILEGED_GROUP;
use ferrokube_auth::{Attributes, Authorizer, UserInfo};
use ferrokube_registry::Admit;
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use serde_json::Value;

use crate::security::ClusterState;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
const NODE_RESTRICTION_LABEL_PREFIX: &str = "node-restriction.kubernetes.io/";

/// What the checks need to know about the request.
#[derive(Clone)]
pub(crate) struct WriteContext {
    pub user: UserInfo,
    pub info: &'static ResourceInfo,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub authorizer: Arc<dyn Authorizer>,
    pub state: Arc<ClusterState>,
}

/// The admission check of a create or update, if the resource has one.
pub(crate) fn admit_for(ctx: WriteContext) -> Option<Admit> {
    let info = ctx.info;
    let rbac_kind = info.group == RBAC_GROUP;
    let node = node_identity(&ctx.user).is_some_and(|n| !n.is_empty());
    let node_restricted = node && info.group.is_empty() && matches!(info.plural, "pods" | "nodes");
    if !rbac_kind && !node_restricted {
        return None;
    }
    Some(Admit(Arc::new(move |new, old| {
        if rbac_kind {
            check_escalation(&ctx, new, old)?;
        }
        if node_restricted {
            node_restriction(&ctx, new, old)?;
        }
        Ok(())
    })))
}

fn name_of(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or("")
}

fn forbidden(ctx: &WriteContext, name: &str, err: impl std::fmt::Display) -> ApiError {
    ApiError::forbidden(ctx.info.group, ctx.info.plural, name, err)
}

/// Whether the user may do `verb` on a role resource by name (the `escalate` and
/// `bind` verbs).
fn may(ctx: &WriteContext, verb: &str, resource: &str, namespace: &str, name: &str) -> bool {
    ctx.authorizer
        .authorize(&Attributes {
            user: ctx.user.clone(),
            verb: verb.into(),
            namespace: namespace.into(),
            api_group: RBAC_GROUP.into(),
            api_version: "v1".into(),
            resource: resource.into(),
            name: name.into(),
            resource_request: true,
            ..Attributes::default()
        })
        .is_allowed()
}

fn rules_of(v: &Value) -> Vec<PolicyRule> {
    v.get("rules")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default()
}

fn check_escalation(ctx: &WriteContext, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    if ctx.user.in_group(SYSTEM_PRIVILEGED_GROUP) {
        return Ok(());
    }
    let name = name_of(new);
    let namespace = ctx.namespace.as_deref().unwrap_or("");
    match ctx.info.plural {
        "roles" | "clusterroles" => {
            if let Some(old) = old
                && only_gc_fields_changed(new, old)
            {
                return Ok(());
            }
            if may(ctx, "escalate", ctx.info.plural, namespace, name) {
                return Ok(());
            }
            let aggregation = &new["aggregationRule"];
            if !aggregation.is_null() && old.is_none_or(|o| o["aggregationRule"] != *aggregation) {
                return Err(forbidden(
                    ctx,
                    name,
                    "must have cluster-admin privileges to use the aggregationRule",
                ));
            }
            let snapshot = ctx.state.snapshot();
            rbac::confirm_no_escalation(&snapshot, &ctx.user, namespace, &rules_of(new))
                .map_err(|e| forbidden(ctx, name, e))
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
            if may(ctx, "bind", resource, namespace, &role_ref.name) {
                return Ok(());
            }
            let snapshot = ctx.state.snapshot();
            let rules = snapshot
                .role_ref_rules(&role_ref, namespace)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "{}.{RBAC_GROUP} {:?} not found",
                        role_ref.kind.to_ascii_lowercase(),
                        role_ref.name
                    ))
                })?;
            rbac::confirm_no_escalation(&snapshot, &ctx.user, namespace, &rules)
                .map_err(|e| forbidden(ctx, name, e))
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

fn node_restriction(ctx: &WriteContext, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let node = node_identity(&ctx.user).unwrap_or("");
    let name = name_of(new);
    match (ctx.info.plural, ctx.subresource.as_deref()) {
        ("pods", None) if old.is_none() => {
            if new["metadata"]["annotations"][MIRROR_POD_ANNOTATION].is_null() {
                return Err(forbidden(
                    ctx,
                    name,
                    format!(
                        "pod does not have {MIRROR_POD_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
                    ),
                ));
            }
            if new["spec"]["nodeName"].as_str() != Some(node) {
                return Err(forbidden(
                    ctx,
                    name,
                    format!("node {node:?} can only create pods with spec.nodeName set to itself"),
                ));
            }
            Ok(())
        }
        ("pods", Some("status")) => {
            let bound = old.unwrap_or(new)["spec"]["nodeName"].as_str();
            if bound != Some(node) {
                return Err(forbidden(
                    ctx,
                    name,
                    format!(
                        "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                    ),
                ));
            }
            Ok(())
        }
        ("pods", _) => Err(forbidden(
            ctx,
            name,
            format!(
                "unexpected operation \"UPDATE\", node {node:?} can only create and delete mirror pods"
            ),
        )),
        ("nodes", _) => {
            if name != node {
                return Err(forbidden(
                    ctx,
                    name,
                    format!("node {node:?} is not allowed to modify node {name:?}"),
                ));
            }
            let restricted = |v: &Value| -> Vec<(String, Value)> {
                v["metadata"]["labels"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| k.starts_with(NODE_RESTRICTION_LABEL_PREFIX))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            match old {
                None => {
                    let set: Vec<String> = restricted(new).into_iter().map(|(k, _)| k).collect();
                    if !set.is_empty() {
                        return Err(forbidden(
                            ctx,
                            name,
                            format!(
                                "node {node:?} is not allowed to set the following labels: {}",
                                set.join(", ")
                            ),
                        ));
                    }
                }
                Some(old) => {
                    if new["spec"]["taints"] != old["spec"]["taints"] {
                        return Err(forbidden(
                            ctx,
                            name,
                            format!("node {node:?} is not allowed to modify taints"),
                        ));
                    }
                    if restricted(new) != restricted(old) {
                        return Err(forbidden(
                            ctx,
                            name,
                            format!(
                                "node {node:?} is not allowed to modify labels with the prefix {NODE_RESTRICTION_LABEL_PREFIX}"
                            ),
                        ));
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// NodeRestriction for a delete or eviction by a node: reads the pod first.
pub(crate) async fn check_node_delete(
    user: &UserInfo,
    store: &ferrokube_registry::Store,
    ns: Option<&str>,
    name: &str,
    eviction: bool,
) -> Result<(), ApiError> {
    if node_identity(user).is_none_or(str::is_empty) {
        return Ok(());
    }
    let info = store.info();
    if !(info.group.is_empty() && matches!(info.plural, "pods" | "nodes")) {
        return Ok(());
    }
    let current = store.get(ns, name).await?;
    admit_node_delete(user, info, &current, eviction)
}

/// NodeRestriction for deletes and evictions: a node deletes only pods bound to it
/// and only its own Node.
pub(crate) fn admit_node_delete(
    user: &UserInfo,
    info: &ResourceInfo,
    current: &Value,
    eviction: bool,
) -> Result<(), ApiError> {
    let Some(node) = node_identity(user).filter(|n| !n.is_empty()) else {
        return Ok(());
    };
    if !info.group.is_empty() {
        return Ok(());
    }
    if info.plural == "nodes" {
        if name_of(current) == node {
            return Ok(());
        }
        return Err(ApiError::forbidden(
            info.group,
            info.plural,
            name_of(current),
            format!(
                "node {node:?} is not allowed to modify node {:?}",
                name_of(current)
            ),
        ));
    }
    if info.plural != "pods" || current["spec"]["nodeName"].as_str() == Some(node) {
        return Ok(());
    }
    let what = if eviction { "evict" } else { "delete" };
    Err(ApiError::forbidden(
        info.group,
        info.plural,
        name_of(current),
        format!("node {node:?} can only {what} pods with spec.nodeName set to itself"),
    ))
}

/// Where the ServiceAccount plugin mounts the token volume.
pub(crate) const SERVICE_ACCOUNT_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The ServiceAccount admission plugin (upstream
/// `plugin/pkg/admission/serviceaccount`), run on pod creation before the store:
/// defaults `spec.serviceAccountName` to `default`, rejects pods whose service
/// account does not exist, and unless automounting is off (pod, then service
/// account) adds the projected `kube-api-access-<suffix>` volume (token, the
/// `kube-root-ca.crt` CA bundle, the namespace) mounted read-only in every container
/// at [`SERVICE_ACCOUNT_MOUNT_PATH`]; the account's imagePullSecrets are added when
/// the pod has none. Mirror pods are left alone.
pub(crate) fn service_account_admit(
    pod: &mut Value,
    namespace: &str,
    service_account: impl FnOnce(&str) -> Option<Value>,
    suffix: &str,
) -> Result<(), ApiError> {
    if !pod["metadata"]["annotations"][MIRROR_POD_ANNOTATION].is_null() {
        return Ok(());
    }
    let name = pod["spec"]["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            pod["spec"]["serviceAccount"]
                .as_str()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or("default")
        .to_string();
    let Some(sa) = service_account(&name) else {
        return Err(ApiError::forbidden(
            "",
            "pods",
            name_of(pod),
            format!(
                "error looking up service account {namespace}/{name}: serviceaccount {name:?} not found"
            ),
        ));
    };
    let spec = &mut pod["spec"];
    spec["serviceAccountName"] = Value::String(name.clone());
    spec["serviceAccount"] = Value::String(name);
    if spec["imagePullSecrets"]
        .as_array()
        .is_none_or(|a| a.is_empty())
        && let Some(secrets) = sa["imagePullSecrets"].as_array().filter(|a| !a.is_empty())
    {
        spec["imagePullSecrets"] = Value::Array(secrets.clone());
    }
    let automount = spec["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    let volume_name = format!("kube-api-access-{suffix}");
    let mut mounted = false;
    for kind in ["initContainers", "containers"] {
        for c in spec[kind].as_array_mut().into_iter().flatten() {
            let has = c["volumeMounts"].as_array().is_some_and(|m| {
                m.iter()
                    .any(|m| m["mountPath"] == SERVICE_ACCOUNT_MOUNT_PATH)
            });
            if has {
                continue;
            }
            if !c["volumeMounts"].is_array() {
                c["volumeMounts"] = Value::Array(Vec::new());
            }
            if let Some(m) = c["volumeMounts"].as_array_mut() {
                m.push(serde_json::json!({"name": volume_name, "readOnly": true,
                    "mountPath": SERVICE_ACCOUNT_MOUNT_PATH}));
                mounted = true;
            }
        }
    }
    if mounted {
        if !spec["volumes"].is_array() {
            spec["volumes"] = Value::Array(Vec::new());
        }
        if let Some(v) = spec["volumes"].as_array_mut() {
            v.push(serde_json::json!({
                "name": volume_name,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                    ]
                }
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_account_plugin_defaults_and_projects_the_token() {
        let sa = || {
            Some(json!({"metadata": {"name": "default"}, "imagePullSecrets": [{"name": "pull"}]}))
        };
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i", "image": "x"}],
            "containers": [{"name": "c", "image": "x"},
                {"name": "own", "image": "x", "volumeMounts": [{"name": "mine", "mountPath": SERVICE_ACCOUNT_MOUNT_PATH}]}]}});
        service_account_admit(&mut pod, "ns", |_| sa(), "abcde").unwrap();
        let spec = &pod["spec"];
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "pull"}]));
        assert_eq!(spec["volumes"][0]["name"], "kube-api-access-abcde");
        assert_eq!(
            spec["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        assert_eq!(
            spec["containers"][0]["volumeMounts"][0],
            json!({"name": "kube-api-access-abcde", "readOnly": true, "mountPath": SERVICE_ACCOUNT_MOUNT_PATH})
        );
        assert_eq!(
            spec["initContainers"][0]["volumeMounts"][0]["name"],
            "kube-api-access-abcde"
        );
        assert_eq!(
            spec["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );

        let mut off = json!({"metadata": {"name": "p"}, "spec": {"automountServiceAccountToken": false,
            "serviceAccountName": "robot", "containers": [{"name": "c", "image": "x"}]}});
        service_account_admit(&mut off, "ns", |n| (n == "robot").then(|| json!({})), "x").unwrap();
        assert!(off["spec"]["volumes"].is_null());
        let mut missing = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let e = service_account_admit(&mut missing, "ns", |_| None, "x").unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods \"p\" is forbidden: error looking up service account ns/default: serviceaccount \"default\" not found"
        );
        let mut mirror =
            json!({"metadata": {"annotations": {MIRROR_POD_ANNOTATION: "x"}}, "spec": {}});
        service_account_admit(&mut mirror, "ns", |_| None, "x").unwrap();
        assert!(mirror["spec"]["serviceAccountName"].is_null());
    }

    #[test]
    fn gc_only_changes_are_recognised() {
        let a = json!({"metadata": {"name": "r", "finalizers": ["x"]}, "rules": []});
        let b = json!({"metadata": {"name": "r"}, "rules": []});
        assert!(only_gc_fields_changed(&a, &b));
        let c = json!({"metadata": {"name": "r"}, "rules": [{"verbs": ["get"]}]});
        assert!(!only_gc_fields_changed(&c, &b));
    }

    #[test]
    fn node_deletes_only_its_pods() {
        let info = ferrokube_api::resources::lookup("", "v1", "pods").unwrap();
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "a"}});
        assert!(admit_node_delete(&node_a, info, &pod, false).is_ok());
        let node_b = UserInfo::new("system:node:b", ["system:nodes"]);
        let e = admit_node_delete(&node_b, info, &pod, true).unwrap_err();
        assert_eq!(e.code, 403);
        assert!(
            e.message.contains("node \"b\" can only evict pods"),
            "{}",
            e.message
        );
        assert!(admit_node_delete(&UserInfo::new("alice", ["x"]), info, &pod, false).is_ok());
    }
}
