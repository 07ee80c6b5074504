//! The node's CSINode object (upstream `pkg/volume/csi/nodeinfomanager`,
//! `InitializeCSINodeWithAnnotation`): every kubelet publishes one, named after its Node
//! and owned by it, listing the CSI drivers registered on the node (none here: this
//! kubelet runs no CSI plugins) and, in `storage.alpha.kubernetes.io/migrated-plugins`,
//! the in-tree volume plugins whose volumes go through CSI drivers instead. Layer: a
//! kubelet API client; it does not touch the runtime.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSINode, CSINodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;

/// The annotation listing the migrated in-tree plugins.
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";

/// The in-tree plugins migrated to CSI in 1.33 (all of upstream's, every migration gate
/// being on), sorted as upstream writes them.
pub const MIGRATED_PLUGINS: &[&str] = &[
    "kubernetes.io/aws-ebs",
    "kubernetes.io/azure-disk",
    "kubernetes.io/azure-file",
    "kubernetes.io/cinder",
    "kubernetes.io/gce-pd",
    "kubernetes.io/portworx-volume",
    "kubernetes.io/vsphere-volume",
];

/// The CSINode a new node gets (upstream `CreateCSINode`).
pub fn initial_csi_node(node: &Node) -> CSINode {
    let name = node.metadata.name.clone().unwrap_or_default();
    let mut csi_node = CSINode {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name,
                uid: node.metadata.uid.clone().unwrap_or_default(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: CSINodeSpec { drivers: vec![] },
    };
    set_migration_annotation(&mut csi_node);
    csi_node
}

/// Upstream `setMigrationAnnotation`: whether the annotation had to change.
pub fn set_migration_annotation(csi_node: &mut CSINode) -> bool {
    let want = MIGRATED_PLUGINS.join(",");
    let annotations = csi_node
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if annotations.get(MIGRATED_PLUGINS_ANNOTATION) == Some(&want) {
        return false;
    }
    annotations.insert(MIGRATED_PLUGINS_ANNOTATION.into(), want);
    true
}

/// Creates the node's CSINode, or brings the annotation of an existing one up to date
/// (upstream `tryInitializeCSINodeWithAnnotation`).
pub async fn ensure(client: &kube::Client, node: &Node) -> Result<(), kube::Error> {
    let api: Api<CSINode> = Api::all(client.clone());
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match api.get_opt(name).await? {
        None => api
            .create(&PostParams::default(), &initial_csi_node(node))
            .await
            .map(drop),
        Some(mut existing) => {
            if set_migration_annotation(&mut existing) {
                api.replace(name, &PostParams::default(), &existing).await?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_node_gets_an_owned_csinode_with_the_migrated_plugins() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "uid": "u-1"},
        }))
        .unwrap();
        let csi = serde_json::to_value(initial_csi_node(&node)).unwrap();
        assert_eq!(csi["metadata"]["name"], "n1");
        assert_eq!(
            csi["metadata"]["ownerReferences"],
            serde_json::json!([{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1"}])
        );
        assert_eq!(
            csi["metadata"]["annotations"][MIGRATED_PLUGINS_ANNOTATION],
            "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,\
             kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,\
             kubernetes.io/vsphere-volume"
        );
        assert_eq!(csi["spec"]["drivers"], serde_json::json!([]));
    }

    #[test]
    fn the_annotation_is_rewritten_only_when_it_differs() {
        let mut csi = CSINode::default();
        assert!(set_migration_annotation(&mut csi));
        assert!(!set_migration_annotation(&mut csi));
        csi.metadata.annotations.as_mut().unwrap().insert(
            MIGRATED_PLUGINS_ANNOTATION.into(),
            "kubernetes.io/gce-pd".into(),
        );
        assert!(set_migration_annotation(&mut csi));
    }
}
