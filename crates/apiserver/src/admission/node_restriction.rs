//! NodeRestriction (upstream `plugin/pkg/admission/noderestriction`): a kubelet
//! (`system:node:<name>` in `system:nodes`) may create only mirror pods bound to
//! itself, update only the status of its own pods, delete or evict only its own
//! pods, and modify only its own Node, without changing its taints, its config source
//! or labels beyond the kubelet's own (`node-restriction.kubernetes.io` and unknown
//! `kubernetes.io`/`k8s.io` ones), write only its own Lease (in `kube-node-lease`)
//! and its own CSINode, and ask for node certificates only in its own name. Evictions
//! reach it as a CREATE of `pods/eviction` with the Eviction object; it reads the pod
//! to check its node.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_api::kubelet_labels::{
    in_namespace, is_kubelet_label, is_kubernetes_label, label_namespace,
};
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::UserInfo;
use ferrokube_auth::node::node_identity;
use ferrokube_registry::Store;
use serde_json::Value;

use super::{Attributes, MIRROR_POD_ANNOTATION, Operation, Plugin, PluginInit, name_of};

pub(crate) const NAME: &str = "NodeRestriction";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
const NODE_RESTRICTION_LABEL_NAMESPACE: &str = "node-restriction.kubernetes.io";
/// The signers whose certificates name a node (upstream `KubeletServingSignerName`,
/// `KubeAPIServerClientKubeletSignerName`).
const NODE_SIGNERS: [&str; 2] = [
    "kubernetes.io/kubelet-serving",
    "kubernetes.io/kube-apiserver-client-kubelet",
];

pub(crate) struct NodeRestriction {
    /// For evictions, whose object is the Eviction, not the pod.
    pods: Option<Arc<Store>>,
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeRestriction {
        pods: Some(
            init.registry
                .store("", "v1", "pods")
                .cloned()
                .ok_or("no pods store")?,
        ),
    }))
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
            && (a.resource.group.is_empty() && matches!(a.resource.plural, "pods" | "nodes")
                || a.is("coordination.k8s.io", "leases")
                || a.is("storage.k8s.io", "csinodes")
                || a.is("certificates.k8s.io", "certificatesigningrequests")
                    && a.operation == Operation::Create
                    && a.subresource.is_empty()
                || a.is_core("persistentvolumeclaims") && a.subresource == "status")
            && a.operation != Operation::Connect
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if a.is("coordination.k8s.io", "leases") || a.is("storage.k8s.io", "csinodes") {
            return check_own_object(a, object.or(old));
        }
        if a.is("certificates.k8s.io", "certificatesigningrequests") {
            return object.map_or(Ok(()), |csr| check_node_csr(a, csr));
        }
        if a.is_core("persistentvolumeclaims") {
            return check_claim_status(a, object, old);
        }
        match (object, old) {
            (Some(eviction), None) if a.is_core("pods") && a.subresource == "eviction" => {
                self.check_eviction(a, eviction).await
            }
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
        ("pods", sub) if !sub.is_empty() => Err(forbidden(format!(
            "unexpected pod subresource {sub:?}, only 'status' and 'eviction' are allowed"
        ))),
        ("pods", _) => Err(forbidden(format!(
            "unexpected operation \"UPDATE\", node {node:?} can only create and delete mirror pods"
        ))),
        ("nodes", _) => {
            if name != node {
                return Err(forbidden(format!(
                    "node {node:?} is not allowed to modify node {name:?}"
                )));
            }
            let config_source = &new["spec"]["configSource"];
            match old {
                None => {
                    if !config_source.is_null() {
                        return Err(forbidden(format!(
                            "node {node:?} is not allowed to create pods with a non-nil configSource"
                        )));
                    }
                    let set = forbidden_labels(new, &Value::Null);
                    if !set.is_empty() {
                        return Err(forbidden(format!(
                            "node {node:?} is not allowed to set the following labels: {}",
                            set.join(", ")
                        )));
                    }
                }
                Some(old) => {
                    // Only a non-nil one: old kubelets may drop the field on status writes.
                    if !config_source.is_null() && *config_source != old["spec"]["configSource"] {
                        return Err(forbidden(format!(
                            "node {node:?} is not allowed to update configSource to a new non-nil configSource"
                        )));
                    }
                    if new["spec"]["taints"] != old["spec"]["taints"] {
                        return Err(forbidden(format!(
                            "node {node:?} is not allowed to modify taints"
                        )));
                    }
                    let modified = forbidden_labels(new, old);
                    if !modified.is_empty() {
                        return Err(forbidden(format!(
                            "is not allowed to modify labels: {}",
                            modified.join(", ")
                        )));
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The labels added, removed or changed between `old` and `new` that a kubelet may not
/// touch, sorted (upstream `getModifiedLabels` and `getForbiddenLabels`): those in the
/// node-restriction namespace, and `kubernetes.io` or `k8s.io` ones that are not the
/// kubelet's own.
fn forbidden_labels(new: &Value, old: &Value) -> Vec<String> {
    let labels = |v: &Value| {
        v["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    };
    let (new, old) = (labels(new), labels(old));
    let modified = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(v))
        .chain(old.iter().filter(|(k, v)| new.get(*k) != Some(v)))
        .map(|(k, _)| k.as_str());
    let mut forbidden: Vec<String> = modified
        .filter(|label| {
            in_namespace(label_namespace(label), NODE_RESTRICTION_LABEL_NAMESPACE)
                || (is_kubernetes_label(label) && !is_kubelet_label(label))
        })
        .map(str::to_string)
        .collect();
    forbidden.sort();
    forbidden.dedup();
    forbidden
}

/// Upstream `admitPVCStatus`: a kubelet changes only a claim's capacity, conditions and
/// allocated resources (resizing), through its status, by update. Upstream's message
/// ends in a `cmp.Diff` of the objects; this one names the changed fields instead.
fn check_claim_status(
    a: &Attributes,
    new: Option<&Value>,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let Some(node) = node_of(&a.user) else {
        return Ok(());
    };
    let (Some(new), Some(old), Operation::Update) = (new, old, a.operation) else {
        return Err(a.forbidden(format!("unexpected operation {:?}", a.operation.as_str())));
    };
    let comparable = |claim: &Value| {
        let mut claim = claim.clone();
        for (parent, field) in [
            ("metadata", "resourceVersion"),
            ("metadata", "managedFields"),
            ("status", "capacity"),
            ("status", "conditions"),
            ("status", "allocatedResourceStatuses"),
            ("status", "allocatedResources"),
        ] {
            if let Some(parent) = claim.get_mut(parent).and_then(Value::as_object_mut) {
                parent.remove(field);
            }
        }
        claim
    };
    let mut changed = Vec::new();
    changed_fields(&comparable(old), &comparable(new), "", &mut changed);
    if changed.is_empty() {
        return Ok(());
    }
    Err(a.forbidden_named(
        name_of(new),
        format!(
            "node {node:?} is not allowed to update fields other than status.quantity and status.conditions: {}",
            changed.join(", ")
        ),
    ))
}

/// The dotted paths where `old` and `new` differ (objects compared member by member).
fn changed_fields(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
            for key in keys {
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let missing = Value::Null;
                changed_fields(
                    o.get(key).unwrap_or(&missing),
                    n.get(key).unwrap_or(&missing),
                    &at,
                    out,
                );
            }
        }
        (o, n) if o != n => out.push(path.to_string()),
        _ => {}
    }
}

/// Upstream `admitCSR`: a node certificate a kubelet asks for names that kubelet.
fn check_node_csr(a: &Attributes, csr: &Value) -> Result<(), ApiError> {
    let Some(node) = node_of(&a.user) else {
        return Ok(());
    };
    let signer = csr["spec"]["signerName"].as_str().unwrap_or("");
    if !NODE_SIGNERS.contains(&signer) {
        return Ok(());
    }
    let request = csr["spec"]["request"].as_str().unwrap_or("");
    let (common_name, _) = super::certificates::request_subject(request)
        .map_err(|e| a.forbidden(format!("unable to parse csr: {e}")))?;
    if common_name != format!("system:node:{node}") {
        return Err(a.forbidden(format!(
            "can only create a node CSR with CN=system:node:{node}"
        )));
    }
    Ok(())
}

/// Upstream `admitLease` and `admitCSINode`: whatever the operation, a node touches
/// only the Lease (in `kube-node-lease`) and the CSINode named after it.
fn check_own_object(a: &Attributes, object: Option<&Value>) -> Result<(), ApiError> {
    let Some(node) = node_of(&a.user) else {
        return Ok(());
    };
    let name = object.map_or(a.name.as_str(), name_of);
    if a.is("coordination.k8s.io", "leases") {
        if a.namespace != NODE_LEASE_NAMESPACE {
            return Err(a.forbidden_named(
                name,
                format!("can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"),
            ));
        }
        if name != node {
            return Err(a.forbidden_named(
                name,
                "can only access node lease with the same name as the requesting node",
            ));
        }
    } else if name != node {
        return Err(a.forbidden_named(
            name,
            "can only access CSINode with the same name as the requesting node",
        ));
    }
    Ok(())
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

impl NodeRestriction {
    /// Upstream `admitPodEviction`: the pod named by the request (or by the
    /// Eviction) must be bound to the node.
    async fn check_eviction(&self, a: &Attributes, eviction: &Value) -> Result<(), ApiError> {
        let name = if a.name.is_empty() {
            name_of(eviction)
        } else {
            a.name.as_str()
        };
        if name.is_empty() {
            return Err(a.forbidden("could not determine pod from request data"));
        }
        let Some(pods) = &self.pods else {
            return Ok(());
        };
        let pod = pods.get(Some(&a.namespace), name).await?;
        check_delete(&a.user, a, &pod, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NR: NodeRestriction = NodeRestriction { pods: None };

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
        assert!(NR.handles(&a));
        NR.validate(&a, None, Some(&pod)).await.unwrap();
        let node_b = UserInfo::new("system:node:b", ["system:nodes"]);
        let b = attrs(&node_b, Operation::Delete, "pods", "");
        let e = NR.validate(&b, None, Some(&pod)).await.unwrap_err();
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
        assert!(!NR.handles(&attrs(&alice, Operation::Delete, "pods", "")));
    }

    #[tokio::test]
    async fn node_writes_only_mirror_pods_own_status_and_own_node() {
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        let create = attrs(&node_a, Operation::Create, "pods", "");
        let plain = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "a"}});
        let e = NR.validate(&create, Some(&plain), None).await.unwrap_err();
        assert!(
            e.message.contains("can only create mirror pods"),
            "{}",
            e.message
        );
        let mirror = json!({"metadata": {"name": "p", "annotations": {MIRROR_POD_ANNOTATION: "x"}},
            "spec": {"nodeName": "a"}});
        NR.validate(&create, Some(&mirror), None).await.unwrap();
        let status = attrs(&node_a, Operation::Update, "pods", "status");
        let other = json!({"metadata": {"name": "q"}, "spec": {"nodeName": "b"}});
        assert!(
            NR.validate(&status, Some(&other), Some(&other))
                .await
                .is_err()
        );
        NR.validate(&status, Some(&plain), Some(&plain))
            .await
            .unwrap();
        let node_update = attrs(&node_a, Operation::Update, "nodes", "");
        let old = json!({"metadata": {"name": "a"}, "spec": {}});
        let tainted = json!({"metadata": {"name": "a"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
        let e = NR
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
            NR.validate(&node_create, Some(&labelled), None)
                .await
                .is_err()
        );
        let b = json!({"metadata": {"name": "b"}});
        assert!(NR.validate(&node_create, Some(&b), None).await.is_err());
    }

    /// Upstream's label policy: the kubelet's own labels, anything outside
    /// kubernetes.io and k8s.io, never node-restriction ones; and no config source.
    #[tokio::test]
    async fn node_labels_and_config_source() {
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        let node = |labels: Value| json!({"metadata": {"name": "a", "labels": labels}, "spec": {}});
        let create = attrs(&node_a, Operation::Create, "nodes", "");
        let own = node(
            json!({"kubernetes.io/hostname": "a", "kubernetes.io/os": "linux",
            "node.kubernetes.io/exclude-from-external-load-balancers": "",
            "x.kubelet.kubernetes.io/y": "z", "example.com/team": "blue"}),
        );
        NR.validate(&create, Some(&own), None).await.unwrap();
        let role = node(json!({"node-role.kubernetes.io/worker": "",
            "a.node-restriction.kubernetes.io/b": "c", "kubernetes.io/hostname": "a"}));
        let e = NR.validate(&create, Some(&role), None).await.unwrap_err();
        assert_eq!(
            e.message,
            "nodes \"a\" is forbidden: node \"a\" is not allowed to set the following labels: a.node-restriction.kubernetes.io/b, node-role.kubernetes.io/worker"
        );
        let update = attrs(&node_a, Operation::Update, "nodes", "");
        let relabelled = node(json!({"kubernetes.io/hostname": "b", "k8s.io/x": "1"}));
        let e = NR
            .validate(&update, Some(&relabelled), Some(&own))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "nodes \"a\" is forbidden: is not allowed to modify labels: k8s.io/x"
        );
        // Removing one counts as modifying it.
        let e = NR
            .validate(&update, Some(&own), Some(&role))
            .await
            .unwrap_err();
        assert!(
            e.message
                .ends_with("a.node-restriction.kubernetes.io/b, node-role.kubernetes.io/worker"),
            "{}",
            e.message
        );
        let configured = json!({"metadata": {"name": "a"},
            "spec": {"configSource": {"configMap": {"name": "c", "namespace": "kube-system", "kubeletConfigKey": "k"}}}});
        let e = NR
            .validate(&create, Some(&configured), None)
            .await
            .unwrap_err();
        assert!(
            e.message
                .ends_with("is not allowed to create pods with a non-nil configSource")
        );
        let e = NR
            .validate(&update, Some(&configured), Some(&own))
            .await
            .unwrap_err();
        assert!(
            e.message
                .ends_with("is not allowed to update configSource to a new non-nil configSource")
        );
        NR.validate(&update, Some(&configured), Some(&configured))
            .await
            .unwrap();
    }

    /// Upstream `admitPVCStatus`: a kubelet resizes a claim; nothing else.
    #[tokio::test]
    async fn node_changes_only_a_claims_resize_status() {
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        let update = attrs(
            &node_a,
            Operation::Update,
            "persistentvolumeclaims",
            "status",
        );
        assert!(NR.handles(&update));
        let old = json!({"metadata": {"name": "c", "resourceVersion": "1"},
            "spec": {"resources": {"requests": {"storage": "2Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}});
        let resized = json!({"metadata": {"name": "c", "resourceVersion": "2"},
            "spec": {"resources": {"requests": {"storage": "2Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "2Gi"},
                "conditions": [{"type": "FileSystemResizePending", "status": "True"}]}});
        NR.validate(&update, Some(&resized), Some(&old))
            .await
            .unwrap();
        let mut relabelled = resized.clone();
        relabelled["metadata"]["labels"] = json!({"x": "y"});
        relabelled["status"]["phase"] = json!("Lost");
        let e = NR
            .validate(&update, Some(&relabelled), Some(&old))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "persistentvolumeclaims \"c\" is forbidden: node \"a\" is not allowed to update fields other than status.quantity and status.conditions: metadata.labels, status.phase"
        );
        // Anybody else is not the plugin's to check.
        let admin = UserInfo::new("admin", ["system:masters"]);
        let by_admin = attrs(
            &admin,
            Operation::Update,
            "persistentvolumeclaims",
            "status",
        );
        assert!(!NR.handles(&by_admin));
    }

    /// Upstream `admitCSR`: node certificates only in the node's own name.
    #[tokio::test]
    async fn node_certificates_only_in_its_own_name() {
        use base64::Engine as _;
        let info = ferrokube_api::resources::lookup(
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
        )
        .unwrap();
        let request = base64::engine::general_purpose::STANDARD
            .encode(super::super::certificates::tests::NODE_A_CSR);
        let csr = |signer: &str| {
            json!({"metadata": {"name": "csr-1"},
            "spec": {"signerName": signer, "request": request, "usages": ["client auth"]}})
        };
        for (node, signer, allowed) in [
            ("a", "kubernetes.io/kube-apiserver-client-kubelet", true),
            ("a", "kubernetes.io/kubelet-serving", true),
            ("b", "kubernetes.io/kubelet-serving", false),
            ("b", "kubernetes.io/kube-apiserver-client-kubelet", false),
            ("b", "example.com/other", true),
        ] {
            let user = UserInfo::new(format!("system:node:{node}"), ["system:nodes"]);
            let a = Attributes::new(user, Operation::Create, info);
            assert!(NR.handles(&a));
            let result = NR.validate(&a, Some(&csr(signer)), None).await;
            assert_eq!(result.is_ok(), allowed, "{node} {signer}: {result:?}");
            if let Err(e) = result {
                assert!(
                    e.message
                        .ends_with("can only create a node CSR with CN=system:node:b"),
                    "{}",
                    e.message
                );
            }
        }
    }

    #[tokio::test]
    async fn node_writes_only_its_own_lease_and_csinode() {
        let node_a = UserInfo::new("system:node:a", ["system:nodes"]);
        let request = |group: &str, plural: &str, ns: &str, op: Operation| {
            let info = ferrokube_api::resources::lookup(group, "v1", plural).unwrap();
            Attributes::new(node_a.clone(), op, info).in_namespace(Some(ns))
        };
        let named = |name: &str| json!({"metadata": {"name": name}});
        let lease = request(
            "coordination.k8s.io",
            "leases",
            NODE_LEASE_NAMESPACE,
            Operation::Create,
        );
        assert!(NR.handles(&lease));
        NR.validate(&lease, Some(&named("a")), None).await.unwrap();
        let e = NR
            .validate(&lease, Some(&named("b")), None)
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "leases.coordination.k8s.io \"b\" is forbidden: can only access node lease with the same name as the requesting node"
        );
        let elsewhere = request(
            "coordination.k8s.io",
            "leases",
            "default",
            Operation::Update,
        );
        let e = NR
            .validate(&elsewhere, Some(&named("a")), Some(&named("a")))
            .await
            .unwrap_err();
        assert!(
            e.message
                .ends_with("can only access leases in the \"kube-node-lease\" system namespace"),
            "{}",
            e.message
        );

        let csinode = request("storage.k8s.io", "csinodes", "", Operation::Delete);
        assert!(NR.handles(&csinode));
        NR.validate(&csinode, None, Some(&named("a")))
            .await
            .unwrap();
        let e = NR
            .validate(&csinode, None, Some(&named("b")))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "csinodes.storage.k8s.io \"b\" is forbidden: can only access CSINode with the same name as the requesting node"
        );
        // Anybody else is not this plugin's business.
        let alice = UserInfo::new("alice", ["x"]);
        let info = ferrokube_api::resources::lookup("storage.k8s.io", "v1", "csinodes").unwrap();
        assert!(!NR.handles(&Attributes::new(alice, Operation::Create, info)));
    }
}
