//! NodeRestriction (upstream `plugin/pkg/admission/noderestriction`): a kubelet
//! (`system:node:<name>` in `system:nodes`) may create only mirror pods bound to
//! itself, update only the status of its own pods, delete or evict only its own
//! pods, and modify only its own Node, without changing its taints or the
//! `node-restriction.kubernetes.io/` labels.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::UserInfo;
use ferrokube_auth::node::node_identity;
use serde_json::Value;

use super::{Attributes, MIRROR_POD_ANNOTATION, Operation, Plugin, PluginInit, name_of};

pub(crate) const NAME: &str = "NodeRestriction";
const NODE_RESTRICTION_LABEL_PREFIX: &str = "node-restriction.kubernetes.io/";

pub(crate) struct NodeRestriction;

pub(crate) fn new(_: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeRestriction))
}

/// The node name of a kubelet's identity (None for anybody else).
fn node_of(user: &UserInfo) -> Option<&str> {
    node_identity(user).filter(|n| !n.is_empty())
}

#[async_trait]
impl Plugin for NodeRestriction {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        node_of(&a.user).is_some()
            && a.resource.group.is_empty()
            && matches!(a.resource.plural, "pods" | "nodes")
            && a.operation != Operation::Connect
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        match (object, old) {
            (Some(new), old) => check_write(a, new, old),
            (None, Some(current)) => check_delete(&a.user, a, current, false),
            (None, None) => Ok(()),
        }
    }
}

fn check_write(a: &Attributes, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let Some(node) = node_of(&a.user) else {
        return Ok(());
    };
    let name = name_of(new);
    let forbidden = |msg: String| a.forbidden_named(name, msg);
    match (a.resource.plural, a.subresource.as_str()) {
        ("pods", "") if old.is_none() => {
            if new["metadata"]["annotations"][MIRROR_POD_ANNOTATION].is_null() {
                return Err(forbidden(format!(
                    "pod does not have {MIRROR_POD_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
                )));
            }
            if new["spec"]["nodeName"].as_str() != Some(node) {
                return Err(forbidden(format!(
                    "node {node:?} can only create pods with spec.nodeName set to itself"
                )));
            }
            Ok(())
        }
        ("pods", "status") => {
            let bound = old.unwrap_or(new)["spec"]["nodeName"].as_str();
            if bound != Some(node) {
                return Err(forbidden(format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                )));
            }
            Ok(())
        }
        ("pods", _) => Err(forbidden(format!(
            "unexpected operation \"UPDATE\", node {node:?} can only create and delete mirror pods"
        ))),
        ("nodes", _) => {
            if name != node {
                return Err(forbidden(format!(
                    "node {node:?} is not allowed to modify node {name:?}"
                )));
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
                        return Err(forbidden(format!(
                            "node {node:?} is not allowed to set the following labels: {}",
                            set.join(", ")
                        )));
                    }
                }
                Some(old) => {
                    if new["spec"]["taints"] != old["spec"]["taints"] {
                        return Err(forbidden(format!(
                            "node {node:?} is not allowed to modify taints"
                        )));
                    }
                    if restricted(new) != restricted(old) {
                        return Err(forbidden(format!(
                            "node {node:?} is not allowed to modify labels with the prefix {NODE_RESTRICTION_LABEL_PREFIX}"
                        )));
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Deletes and evictions: a node deletes only pods bound to it and only its own
/// Node.
fn check_delete(
    user: &UserInfo,
    a: &Attributes,
    current: &Value,
    eviction: bool,
) -> Result<(), ApiError> {
    let Some(node) = node_of(user) else {
        return Ok(());
    };
    let name = name_of(current);
    if a.resource.plural == "nodes" {
        if name == node {
            return Ok(());
        }
        return Err(a.forbidden_named(
            name,
            format!("node {node:?} is not allowed to modify node {name:?}"),
        ));
    }
    if a.resource.plural != "pods" || current["spec"]["nodeName"].as_str() == Some(node) {
        return Ok(());
    }
    let what = if eviction { "evict" } else { "delete" };
    Err(a.forbidden_named(
        name,
        format!("node {node:?} can only {what} pods with spec.nodeName set to itself"),
    ))
}

/// NodeRestriction for `pods/<name>/eviction` by a node (upstream: a CREATE of
/// the eviction subresource): reads the pod first.
pub(crate) async fn check_eviction(
    user: &UserInfo,
    store: &ferrokube_registry::Store,
    ns: Option<&str>,
    name: &str,
) -> Result<(), ApiError> {
    let info = store.info();
    if node_of(user).is_none() || !(info.group.is_empty() && info.plural == "pods") {
        return Ok(());
    }
    let current = store.get(ns, name).await?;
    let a = Attributes::new(user.clone(), Operation::Create, info)
        .in_namespace(ns)
        .named(name);
    check_delete(user, &a, &current, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(user: &UserInfo, op: Operation, plural: &str, sub: &str) -> Attributes {
        let info = ferrokube_api::resources::lookup("", "v1", plural).unwrap();
        let mut a = Attributes::new(user.clone(), op, info).in_namespace(Some("ns"));
        a.subresource = sub.into();
        a
    }

    #[tokio::test]
    async fn node_deletes_only_its_pods() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "a"}});
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        let a = attrs(&node_a, Operation::Delete, "pods", "");
        assert!(NodeRestriction.handles(&a));
        NodeRestriction
            .validate(&a, None, Some(&pod))
            .await
            .unwrap();
        let node_b = UserInfo::new("system:node:b", ["system:nodes"]);
        let b = attrs(&node_b, Operation::Delete, "pods", "");
        let e = NodeRestriction
            .validate(&b, None, Some(&pod))
            .await
            .unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods \"p\" is forbidden: node \"b\" can only delete pods with spec.nodeName set to itself"
        );
        let e = check_delete(&node_b, &b, &pod, true).unwrap_err();
        assert!(
            e.message.contains("node \"b\" can only evict pods"),
            "{}",
            e.message
        );
        let alice = UserInfo::new("alice", ["x"]);
        assert!(!NodeRestriction.handles(&attrs(&alice, Operation::Delete, "pods", "")));
    }

    #[tokio::test]
    async fn node_writes_only_mirror_pods_own_status_and_own_node() {
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        let create = attrs(&node_a, Operation::Create, "pods", "");
        let plain = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "a"}});
        let e = NodeRestriction
            .validate(&create, Some(&plain), None)
            .await
            .unwrap_err();
        assert!(
            e.message.contains("can only create mirror pods"),
            "{}",
            e.message
        );
        let mirror = json!({"metadata": {"name": "p", "annotations": {MIRROR_POD_ANNOTATION: "x"}},
            "spec": {"nodeName": "a"}});
        NodeRestriction
            .validate(&create, Some(&mirror), None)
            .await
            .unwrap();
        let status = attrs(&node_a, Operation::Update, "pods", "status");
        let other = json!({"metadata": {"name": "q"}, "spec": {"nodeName": "b"}});
        assert!(
            NodeRestriction
                .validate(&status, Some(&other), Some(&other))
                .await
                .is_err()
        );
        NodeRestriction
            .validate(&status, Some(&plain), Some(&plain))
            .await
            .unwrap();
        let node_update = attrs(&node_a, Operation::Update, "nodes", "");
        let old = json!({"metadata": {"name": "a"}, "spec": {}});
        let tainted = json!({"metadata": {"name": "a"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
        let e = NodeRestriction
            .validate(&node_update, Some(&tainted), Some(&old))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "nodes \"a\" is forbidden: node \"a\" is not allowed to modify taints"
        );
        let labelled =
            json!({"metadata": {"name": "a", "labels": {"node-restriction.kubernetes.io/x": "y"}}});
        let node_create = attrs(&node_a, Operation::Create, "nodes", "");
        assert!(
            NodeRestriction
                .validate(&node_create, Some(&labelled), None)
                .await
                .is_err()
        );
        let b = json!({"metadata": {"name": "b"}});
        assert!(
            NodeRestriction
                .validate(&node_create, Some(&b), None)
                .await
                .is_err()
        );
    }
}
