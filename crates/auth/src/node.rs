//! The Node authorizer (`plugin/pkg/auth/authorizer/node`): a kubelet
//! (`system:node:<name>` in `system:nodes`) may read the secrets, configmaps,
//! persistent volume claims and volumes of pods bound to its node, request tokens for
//! those pods' service accounts, use its own node Lease, and otherwise only what
//! the `system:node` rules grant. Which objects a node's pods reference is answered
//! over a [`NodeGraph`]; upstream keeps an incremental graph, here the pods on a node
//! are looked up on each decision.
//!
//! Writes to other nodes or to pods not bound to the node are stopped by the
//! NodeRestriction admission plugin in the apiserver, as upstream.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

use crate::authz::{Attributes, Authorizer, Decision};
use crate::rbac::rules_allow;
use crate::user::{NODES_GROUP, UserInfo};

/// Prefix of kubelet user names.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The namespace of node Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The node a user is, if it is a node (upstream `NodeIdentifier`): `Some("")` for a
/// member of `system:nodes` whose name does not say which node.
pub fn node_identity(user: &UserInfo) -> Option<&str> {
    if !user.in_group(NODES_GROUP) {
        return None;
    }
    Some(user.name.strip_prefix(NODE_USER_PREFIX).unwrap_or(""))
}

/// The objects the authorizer needs to look at.
pub trait NodeGraph: Send + Sync {
    /// The pods with `spec.nodeName == node`, in `namespace` (all namespaces for `None`).
    fn pods_on_node(&self, node: &str, namespace: Option<&str>) -> Vec<Arc<Value>>;
    /// A PersistentVolumeClaim.
    fn persistent_volume_claim(&self, namespace: &str, name: &str) -> Option<Arc<Value>>;
    /// A VolumeAttachment.
    fn volume_attachment(&self, name: &str) -> Option<Arc<Value>>;
}

/// What kind of object a pod may reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Referenced {
    Secret,
    ConfigMap,
    PersistentVolumeClaim,
    ServiceAccount,
}

/// Where a path to the node starts (upstream's vertex types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vertex {
    /// An object one of the node's pods references.
    Referenced(Referenced),
    /// Reached through a claim of one of the node's pods.
    PersistentVolume,
    /// Attached to the node (its `spec.nodeName`).
    VolumeAttachment,
    /// One of the node's pods itself.
    Pod,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter())
        .into_iter()
        .flatten()
}

/// Whether `pod` references the object `name` of kind `kind` (upstream
/// `VisitPodSecretNames`, `VisitPodConfigmapNames`, the PVC volume sources and the
/// service account).
pub fn pod_references(pod: &Value, kind: Referenced, name: &str) -> bool {
    let spec = &pod["spec"];
    let is = |v: Option<&str>| v == Some(name);
    match kind {
        Referenced::ServiceAccount => is(str_at(spec, &["serviceAccountName"])),
        Referenced::PersistentVolumeClaim => {
            array(spec, "volumes").any(|v| volume_claim(pod, v).is_some_and(|claim| claim == name))
        }
        Referenced::Secret => {
            array(spec, "imagePullSecrets").any(|s| is(str_at(s, &["name"])))
                || array(spec, "volumes").any(|v| {
                    is(str_at(v, &["secret", "secretName"]))
                        || array(&v["projected"], "sources")
                            .any(|s| is(str_at(s, &["secret", "name"])))
                        // csi, cephfs, flexVolume, iscsi, rbd, scaleIO, storageos, ...:
                        // every volume source names its secret in a secretRef or
                        // nodePublishSecretRef.
                        || v.as_object().into_iter().flatten().any(|(_, src)| {
                            is(str_at(src, &["secretRef", "name"]))
                                || is(str_at(src, &["nodePublishSecretRef", "name"]))
                                || is(str_at(src, &["secretName"]))
                        })
                })
                || containers(spec).any(|c| {
                    array(c, "envFrom").any(|e| is(str_at(e, &["secretRef", "name"])))
                        || array(c, "env")
                            .any(|e| is(str_at(e, &["valueFrom", "secretKeyRef", "name"])))
                })
        }
        Referenced::ConfigMap => {
            array(spec, "volumes").any(|v| {
                is(str_at(v, &["configMap", "name"]))
                    || array(&v["projected"], "sources")
                        .any(|s| is(str_at(s, &["configMap", "name"])))
            }) || containers(spec).any(|c| {
                array(c, "envFrom").any(|e| is(str_at(e, &["configMapRef", "name"])))
                    || array(c, "env")
                        .any(|e| is(str_at(e, &["valueFrom", "configMapKeyRef", "name"])))
            })
        }
    }
}

/// The claim a pod volume reads: a `persistentVolumeClaim`'s, or the `<pod>-<volume>`
/// claim of a generic ephemeral volume (upstream's graph populator adds both edges).
fn volume_claim(pod: &Value, volume: &Value) -> Option<String> {
    if let Some(claim) = str_at(volume, &["persistentVolumeClaim", "claimName"]) {
        return Some(claim.to_string());
    }
    volume.get("ephemeral")?;
    let pod_name = str_at(pod, &["metadata", "name"])?;
    Some(format!("{pod_name}-{}", str_at(volume, &["name"])?))
}

fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    array(spec, "containers")
        .chain(array(spec, "initContainers"))
        .chain(array(spec, "ephemeralContainers"))
}

/// `--authorization-mode=Node`.
pub struct NodeAuthorizer<G> {
    graph: G,
    /// The `system:node` ClusterRole's rules (upstream `bootstrappolicy.NodeRules`).
    node_rules: Vec<PolicyRule>,
    /// AuthorizeNodeWithSelectors: pods and nodes narrowed to the node's own.
    with_selectors: bool,
}

impl<G> std::fmt::Debug for NodeAuthorizer<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeAuthorizer")
    }
}

impl<G: NodeGraph> NodeAuthorizer<G> {
    pub fn new(graph: G, node_rules: Vec<PolicyRule>) -> Self {
        NodeAuthorizer {
            graph,
            node_rules,
            with_selectors: true,
        }
    }

    /// Whether a node's reads of pods and nodes are narrowed to its own (upstream's
    /// AuthorizeNodeWithSelectors gate, on by default in 1.33); without, the
    /// `system:node` rules decide them.
    pub fn narrowing_pods_and_nodes(mut self, with_selectors: bool) -> Self {
        self.with_selectors = with_selectors;
        self
    }

    fn has_path(&self, node: &str, kind: Referenced, namespace: &str, name: &str) -> bool {
        self.graph
            .pods_on_node(node, Some(namespace))
            .iter()
            .any(|pod| pod_references(pod, kind, name))
    }

    /// Upstream `authorizeReadNamespacedObject`: read-only access to a namespaced
    /// object referenced by a pod on the node; list and watch only of a single object
    /// (by `metadata.name` field selector).
    fn read_referenced(&self, node: &str, kind: Referenced, attrs: &Attributes) -> Decision {
        if !attrs.is_read_only() {
            return refused("can only read resources of this type");
        }
        if !attrs.subresource.is_empty() {
            return refused("cannot read subresource");
        }
        if attrs.namespace.is_empty() {
            return refused("can only read namespaced object of this type");
        }
        self.path_decision(node, Vertex::Referenced(kind), attrs)
    }

    /// Upstream `authorizeGet`: a single object, no subresource.
    fn get_referenced(&self, node: &str, vertex: Vertex, attrs: &Attributes) -> Decision {
        if attrs.verb != "get" {
            return refused("can only get individual resources of this type");
        }
        if !attrs.subresource.is_empty() {
            return refused("cannot get subresource");
        }
        self.path_decision(node, vertex, attrs)
    }

    /// Upstream `authorize`: allowed when the named object is reachable from the node.
    fn path_decision(&self, node: &str, vertex: Vertex, attrs: &Attributes) -> Decision {
        if attrs.name.is_empty() {
            return refused("No Object name found");
        }
        let reachable = match vertex {
            Vertex::PersistentVolume => self.persistent_volume_bound(node, &attrs.name),
            Vertex::VolumeAttachment => self
                .graph
                .volume_attachment(&attrs.name)
                .is_some_and(|va| str_at(&va, &["spec", "nodeName"]) == Some(node)),
            Vertex::Pod => self
                .graph
                .pods_on_node(node, Some(&attrs.namespace))
                .iter()
                .any(|pod| str_at(pod, &["metadata", "name"]) == Some(attrs.name.as_str())),
            Vertex::Referenced(kind) => self.has_path(node, kind, &attrs.namespace, &attrs.name),
        };
        if reachable {
            Decision::allow()
        } else {
            unrelated(node)
        }
    }

    fn persistent_volume_bound(&self, node: &str, name: &str) -> bool {
        self.graph.pods_on_node(node, None).iter().any(|pod| {
            let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
            array(&pod["spec"], "volumes").any(|v| {
                volume_claim(pod, v)
                    .and_then(|claim| self.graph.persistent_volume_claim(ns, &claim))
                    .is_some_and(|pvc| pvc["spec"]["volumeName"].as_str() == Some(name))
            })
        })
    }

    /// Upstream `authorizeStatusUpdate`.
    fn status_update(&self, node: &str, vertex: Vertex, attrs: &Attributes) -> Decision {
        if !matches!(attrs.verb.as_str(), "update" | "patch") {
            return refused("can only get/update/patch this type");
        }
        self.path_decision(node, vertex, attrs)
    }

    /// Upstream `authorizeCreateToken`.
    fn create_token(&self, node: &str, attrs: &Attributes) -> Decision {
        if attrs.verb != "create" || attrs.name.is_empty() {
            return refused("can only create tokens for individual service accounts");
        }
        if attrs.subresource != "token" {
            return refused("can only create token subresource of serviceaccount");
        }
        self.path_decision(node, Vertex::Referenced(Referenced::ServiceAccount), attrs)
    }

    fn lease(&self, node: &str, attrs: &Attributes) -> Decision {
        if !matches!(
            attrs.verb.as_str(),
            "get" | "create" | "update" | "patch" | "delete"
        ) {
            return refused("can only get, create, update, patch, or delete a node lease");
        }
        if attrs.namespace != NODE_LEASE_NAMESPACE {
            return Decision::NoOpinion(format!(
                "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
            ));
        }
        if attrs.verb != "create" && attrs.name != node {
            return refused("can only access node lease with the same name as the requesting node");
        }
        Decision::allow()
    }

    /// Upstream's `authorizePod` (AuthorizeNodeWithSelectors, on in 1.33): a pod bound
    /// to the node may be read; pods listed or watched only with a `spec.nodeName=<node>`
    /// field selector; creates and deletes (mirror pods), status writes and evictions
    /// allowed here and narrowed to the node's pods by NodeRestriction.
    fn pod(&self, node: &str, attrs: &Attributes) -> Decision {
        match (attrs.subresource.as_str(), attrs.verb.as_str()) {
            ("", "get") => self.get_referenced(node, Vertex::Pod, attrs),
            ("", "list" | "watch") => {
                let scoped = attrs
                    .field_selector
                    .iter()
                    .any(|r| r.field == "spec.nodeName" && r.equals && r.value == node);
                if scoped {
                    Decision::allow()
                } else if !attrs.name.is_empty() {
                    // One pod named by a `metadata.name` selector, if it is the node's.
                    self.path_decision(node, Vertex::Pod, attrs)
                } else {
                    refused("can only list/watch pods with spec.nodeName field selector")
                }
            }
            ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => {
                Decision::allow()
            }
            _ => Decision::no_opinion(),
        }
    }

    /// Upstream's `authorizeNode` (AuthorizeNodeWithSelectors): a node reads only its
    /// own Node object (a list or watch names it by a `metadata.name` field selector);
    /// creates, updates and status writes are allowed here and narrowed to its own
    /// object by NodeRestriction.
    fn node(&self, node: &str, attrs: &Attributes) -> Decision {
        match (attrs.subresource.as_str(), attrs.verb.as_str()) {
            ("", "create" | "update" | "patch") | ("status", "update" | "patch") => {
                Decision::allow()
            }
            ("", "get" | "list" | "watch") if attrs.name == node => Decision::allow(),
            ("", "get" | "list" | "watch") if attrs.name.is_empty() => Decision::NoOpinion(
                format!("node '{node}' cannot read all nodes, only its own Node object"),
            ),
            ("", "get" | "list" | "watch") => Decision::NoOpinion(format!(
                "node '{node}' cannot read '{}', only its own Node object",
                attrs.name
            )),
            _ => Decision::no_opinion(),
        }
    }

    /// Upstream `authorizeCSINode`: the CSINode named after the node (the name of a
    /// create is checked by NodeRestriction, the authorizer does not see it).
    fn csi_node(&self, node: &str, attrs: &Attributes) -> Decision {
        if !matches!(
            attrs.verb.as_str(),
            "get" | "create" | "update" | "patch" | "delete"
        ) {
            return refused("can only get, create, update, patch, or delete a CSINode");
        }
        if !attrs.subresource.is_empty() {
            return refused("cannot authorize CSINode subresources");
        }
        if attrs.verb != "create" && attrs.name != node {
            return refused("can only access CSINode with the same name as the requesting node");
        }
        Decision::allow()
    }
}

/// Upstream refuses with "no opinion" and a reason, so that a later authorizer in the
/// chain may still allow; the reason reaches the 403 message.
fn refused(reason: &str) -> Decision {
    Decision::NoOpinion(reason.to_string())
}

fn unrelated(node: &str) -> Decision {
    Decision::NoOpinion(format!(
        "no relationship found between node '{node}' and this object"
    ))
}

impl<G: NodeGraph> Authorizer for NodeAuthorizer<G> {
    fn authorize(&self, attrs: &Attributes) -> Decision {
        let Some(node) = node_identity(&attrs.user) else {
            return Decision::no_opinion();
        };
        if node.is_empty() {
            return Decision::NoOpinion(format!("unknown node for user {:?}", attrs.user.name));
        }
        if attrs.resource_request {
            match (attrs.api_group.as_str(), attrs.resource.as_str()) {
                ("", "secrets") => return self.read_referenced(node, Referenced::Secret, attrs),
                ("", "configmaps") => {
                    return self.read_referenced(node, Referenced::ConfigMap, attrs);
                }
                ("", "persistentvolumeclaims") if attrs.subresource == "status" => {
                    return self.status_update(
                        node,
                        Vertex::Referenced(Referenced::PersistentVolumeClaim),
                        attrs,
                    );
                }
                ("", "persistentvolumeclaims") => {
                    return self.get_referenced(
                        node,
                        Vertex::Referenced(Referenced::PersistentVolumeClaim),
                        attrs,
                    );
                }
                ("", "persistentvolumes") => {
                    return self.get_referenced(node, Vertex::PersistentVolume, attrs);
                }
                ("", "serviceaccounts") => return self.create_token(node, attrs),
                ("coordination.k8s.io", "leases") => return self.lease(node, attrs),
                ("", "pods") if self.with_selectors => return self.pod(node, attrs),
                ("", "nodes") if self.with_selectors => return self.node(node, attrs),
                ("storage.k8s.io", "csinodes") => return self.csi_node(node, attrs),
                ("storage.k8s.io", "volumeattachments") => {
                    return self.get_referenced(node, Vertex::VolumeAttachment, attrs);
                }
                _ => {}
            }
        }
        if rules_allow(attrs, &self.node_rules) {
            Decision::allow()
        } else {
            Decision::no_opinion()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Pods(Vec<Arc<Value>>);

    impl NodeGraph for Pods {
        fn pods_on_node(&self, node: &str, namespace: Option<&str>) -> Vec<Arc<Value>> {
            self.0
                .iter()
                .filter(|p| p["spec"]["nodeName"] == node)
                .filter(|p| namespace.is_none_or(|ns| p["metadata"]["namespace"] == ns))
                .cloned()
                .collect()
        }
        fn volume_attachment(&self, name: &str) -> Option<Arc<Value>> {
            (name == "va-a").then(|| Arc::new(json!({"spec": {"nodeName": "a"}})))
        }
        fn persistent_volume_claim(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
            let volume = match (namespace, name) {
                ("ns", "claim") => "pv-1",
                ("ns", "eph-scratch") => "pv-eph",
                _ => return None,
            };
            Some(Arc::new(json!({"spec": {"volumeName": volume}})))
        }
    }

    fn graph() -> Pods {
        Pods(vec![
            Arc::new(json!({
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {
                    "nodeName": "a",
                    "serviceAccountName": "sa",
                    "imagePullSecrets": [{"name": "pull"}],
                    "volumes": [
                        {"name": "v", "secret": {"secretName": "vol"}},
                        {"name": "c", "configMap": {"name": "cm"}},
                        {"name": "pr", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "pcm"}}]}},
                        {"name": "claim", "persistentVolumeClaim": {"claimName": "claim"}},
                        {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}}
                    ],
                    "containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}}],
                        "envFrom": [{"configMapRef": {"name": "envcm"}}]}]
                }
            })),
            Arc::new(json!({
                "metadata": {"name": "eph", "namespace": "ns"},
                "spec": {"nodeName": "a", "containers": [{"name": "c"}],
                         "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}
            })),
        ])
    }

    fn node_attrs(node: &str, verb: &str, resource: &str, name: &str) -> Attributes {
        Attributes {
            user: UserInfo::new(format!("system:node:{node}"), [NODES_GROUP]),
            verb: verb.into(),
            namespace: "ns".into(),
            resource: resource.into(),
            name: name.into(),
            resource_request: true,
            ..Attributes::default()
        }
    }

    fn node_rules() -> Vec<PolicyRule> {
        vec![PolicyRule {
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            api_groups: Some(vec!["".into()]),
            resources: Some(vec!["pods".into()]),
            ..PolicyRule::default()
        }]
    }

    #[test]
    fn node_reads_only_what_its_pods_reference() {
        let authz = NodeAuthorizer::new(graph(), node_rules());
        for secret in ["pull", "vol", "proj", "csi", "env"] {
            assert_eq!(
                authz.authorize(&node_attrs("a", "get", "secrets", secret)),
                Decision::allow(),
                "{secret}"
            );
            assert_eq!(
                authz.authorize(&node_attrs("b", "get", "secrets", secret)),
                unrelated("b")
            );
        }
        assert_eq!(
            authz.authorize(&node_attrs("a", "get", "secrets", "other")),
            unrelated("a")
        );
        assert_eq!(
            authz.authorize(&node_attrs("a", "delete", "secrets", "vol")),
            refused("can only read resources of this type")
        );
        assert_eq!(
            authz.authorize(&node_attrs("a", "list", "secrets", "")),
            refused("No Object name found")
        );
        let mut cluster_wide = node_attrs("a", "get", "secrets", "vol");
        cluster_wide.namespace.clear();
        assert_eq!(
            authz.authorize(&cluster_wide),
            refused("can only read namespaced object of this type")
        );
        let mut claim_list = node_attrs("a", "list", "persistentvolumeclaims", "claim");
        assert_eq!(
            authz.authorize(&claim_list),
            refused("can only get individual resources of this type")
        );
        claim_list.verb = "get".into();
        claim_list.subresource = "status".into();
        assert_eq!(
            authz.authorize(&claim_list),
            refused("can only get/update/patch this type")
        );
        claim_list.verb = "patch".into();
        assert_eq!(authz.authorize(&claim_list), Decision::allow());
        for cm in ["cm", "pcm", "envcm"] {
            assert_eq!(
                authz.authorize(&node_attrs("a", "watch", "configmaps", cm)),
                Decision::allow()
            );
        }
        assert_eq!(
            authz.authorize(&node_attrs("a", "get", "persistentvolumeclaims", "claim")),
            Decision::allow()
        );
        let mut pv = node_attrs("a", "get", "persistentvolumes", "pv-1");
        pv.namespace.clear();
        assert_eq!(authz.authorize(&pv), Decision::allow());
        // A generic ephemeral volume's claim <pod>-<volume>, and its volume.
        assert_eq!(
            authz.authorize(&node_attrs(
                "a",
                "get",
                "persistentvolumeclaims",
                "eph-scratch"
            )),
            Decision::allow()
        );
        let mut eph_pv = node_attrs("a", "get", "persistentvolumes", "pv-eph");
        eph_pv.namespace.clear();
        assert_eq!(authz.authorize(&eph_pv), Decision::allow());
        eph_pv.user = UserInfo::new("system:node:b", [NODES_GROUP]);
        assert_eq!(authz.authorize(&eph_pv), unrelated("b"));
        let mut token = node_attrs("a", "create", "serviceaccounts", "sa");
        token.subresource = "token".into();
        assert_eq!(authz.authorize(&token), Decision::allow());
        token.name = "other".into();
        assert_eq!(authz.authorize(&token), unrelated("a"));
        token.subresource.clear();
        assert_eq!(
            authz.authorize(&token),
            refused("can only create token subresource of serviceaccount")
        );
        token.verb = "get".into();
        assert_eq!(
            authz.authorize(&token),
            refused("can only create tokens for individual service accounts")
        );
        let mut not_node = node_attrs("a", "get", "secrets", "vol");
        not_node.user.groups.clear();
        assert_eq!(authz.authorize(&not_node), Decision::no_opinion());
        let mut unnamed = node_attrs("a", "get", "secrets", "vol");
        unnamed.user.name = "kubelet".into();
        assert_eq!(
            authz.authorize(&unnamed),
            refused("unknown node for user \"kubelet\"")
        );
    }

    /// AuthorizeNodeWithSelectors (on in 1.33): a node reads its own pods and Node
    /// object only, whatever the system:node rules say.
    #[test]
    fn node_pods_and_nodes_with_selectors() {
        let authz = NodeAuthorizer::new(graph(), node_rules());
        let selected = |verb: &str, field: &str, equals: bool, value: &str| {
            let mut a = node_attrs("a", verb, "pods", "");
            a.namespace.clear();
            a.field_selector = vec![crate::request_info::FieldRequirement {
                field: field.into(),
                equals,
                value: value.into(),
            }];
            authz.authorize(&a)
        };
        assert_eq!(
            selected("list", "spec.nodeName", true, "a"),
            Decision::allow()
        );
        assert_eq!(
            selected("watch", "spec.nodeName", true, "a"),
            Decision::allow()
        );
        for (field, equals, value) in [
            ("spec.nodeName", true, "b"),
            ("spec.nodeName", false, "a"),
            ("status.phase", true, "a"),
        ] {
            assert_eq!(
                selected("list", field, equals, value),
                refused("can only list/watch pods with spec.nodeName field selector"),
                "{field} {equals} {value}"
            );
        }
        assert_eq!(
            authz.authorize(&node_attrs("a", "list", "pods", "")),
            refused("can only list/watch pods with spec.nodeName field selector")
        );
        // One pod named by a metadata.name selector: the node's own only.
        assert_eq!(
            authz.authorize(&node_attrs("a", "watch", "pods", "p")),
            Decision::allow()
        );
        assert_eq!(
            authz.authorize(&node_attrs("b", "watch", "pods", "p")),
            unrelated("b")
        );
        // A pod is read only when it is bound to the node.
        assert_eq!(
            authz.authorize(&node_attrs("a", "get", "pods", "p")),
            Decision::allow()
        );
        assert_eq!(
            authz.authorize(&node_attrs("b", "get", "pods", "p")),
            unrelated("b")
        );
        assert_eq!(
            authz.authorize(&node_attrs("a", "get", "pods", "elsewhere")),
            unrelated("a")
        );
        // Mirror pods, status and evictions: NodeRestriction narrows them.
        for (verb, sub) in [
            ("create", ""),
            ("delete", ""),
            ("patch", "status"),
            ("create", "eviction"),
        ] {
            let mut a = node_attrs("a", verb, "pods", "m");
            a.subresource = sub.into();
            assert_eq!(authz.authorize(&a), Decision::allow(), "{verb} {sub}");
        }
        for (verb, sub) in [("update", ""), ("get", "log"), ("create", "exec")] {
            let mut a = node_attrs("a", verb, "pods", "p");
            a.subresource = sub.into();
            assert_eq!(authz.authorize(&a), Decision::no_opinion(), "{verb} {sub}");
        }

        let node = |verb: &str, name: &str, sub: &str| {
            let mut a = node_attrs("a", verb, "nodes", name);
            a.namespace.clear();
            a.subresource = sub.into();
            authz.authorize(&a)
        };
        for verb in ["get", "list", "watch"] {
            assert_eq!(node(verb, "a", ""), Decision::allow(), "{verb}");
            assert_eq!(
                node(verb, "b", ""),
                refused("node 'a' cannot read 'b', only its own Node object"),
                "{verb}"
            );
            assert_eq!(
                node(verb, "", ""),
                refused("node 'a' cannot read all nodes, only its own Node object"),
                "{verb}"
            );
        }
        assert_eq!(node("patch", "a", "status"), Decision::allow());
        assert_eq!(node("create", "a", ""), Decision::allow());
        assert_eq!(node("delete", "a", ""), Decision::no_opinion());
        assert_eq!(node("get", "a", "status"), Decision::no_opinion());

        // AuthorizeNodeWithSelectors off: the system:node rules decide, as before 1.31.
        let unnarrowed = NodeAuthorizer::new(graph(), node_rules()).narrowing_pods_and_nodes(false);
        assert_eq!(
            unnarrowed.authorize(&node_attrs("b", "get", "pods", "p")),
            Decision::allow()
        );
        assert_eq!(
            unnarrowed.authorize(&node_attrs("a", "list", "pods", "")),
            Decision::allow()
        );
    }

    /// A VolumeAttachment is read only by the node it attaches to (upstream's graph
    /// edge from the attachment to its node), and only one at a time.
    #[test]
    fn node_volume_attachments() {
        let authz = NodeAuthorizer::new(graph(), node_rules());
        let attachment = |node: &str, verb: &str, name: &str| {
            let mut a = node_attrs(node, verb, "volumeattachments", name);
            a.api_group = "storage.k8s.io".into();
            a.namespace.clear();
            authz.authorize(&a)
        };
        assert_eq!(attachment("a", "get", "va-a"), Decision::allow());
        assert_eq!(attachment("b", "get", "va-a"), unrelated("b"));
        assert_eq!(attachment("a", "get", "gone"), unrelated("a"));
        assert_eq!(
            attachment("a", "list", ""),
            refused("can only get individual resources of this type")
        );
    }

    #[test]
    fn node_leases() {
        let authz = NodeAuthorizer::new(graph(), node_rules());
        let mut lease = node_attrs("a", "update", "leases", "a");
        lease.api_group = "coordination.k8s.io".into();
        lease.namespace = NODE_LEASE_NAMESPACE.into();
        assert_eq!(authz.authorize(&lease), Decision::allow());
        lease.name = "b".into();
        assert_eq!(
            authz.authorize(&lease),
            refused("can only access node lease with the same name as the requesting node")
        );
        lease.name = "a".into();
        lease.namespace = "default".into();
        assert_eq!(
            authz.authorize(&lease),
            refused("can only access leases in the \"kube-node-lease\" system namespace")
        );
        lease.verb = "list".into();
        assert_eq!(
            authz.authorize(&lease),
            refused("can only get, create, update, patch, or delete a node lease")
        );
    }

    #[test]
    fn node_csinodes() {
        let authz = NodeAuthorizer::new(graph(), node_rules());
        let mut csinode = node_attrs("a", "patch", "csinodes", "a");
        csinode.api_group = "storage.k8s.io".into();
        csinode.namespace = String::new();
        assert_eq!(authz.authorize(&csinode), Decision::allow());
        csinode.name = "b".into();
        assert_eq!(
            authz.authorize(&csinode),
            refused("can only access CSINode with the same name as the requesting node")
        );
        // The name of a create is NodeRestriction's to check.
        csinode.verb = "create".into();
        assert_eq!(authz.authorize(&csinode), Decision::allow());
        csinode.verb = "list".into();
        assert_eq!(
            authz.authorize(&csinode),
            refused("can only get, create, update, patch, or delete a CSINode")
        );
        csinode.verb = "get".into();
        csinode.subresource = "status".into();
        assert_eq!(
            authz.authorize(&csinode),
            refused("cannot authorize CSINode subresources")
        );
    }
}
