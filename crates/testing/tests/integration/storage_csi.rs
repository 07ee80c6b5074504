//! The CSI objects of `storage.k8s.io/v1` (CSIDriver, CSINode, CSIStorageCapacity,
//! VolumeAttachment) as built-in resources through kube-rs: upstream's defaults,
//! validation and immutability, VolumeAttachment's status subresource, the Table columns
//! `kubectl get` prints, and discovery.

use ferrokube_testing::TestApiServer;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, VolumeAttachment};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn from<T: k8s_openapi::serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// The code and message of a refused request.
fn refusal<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    match r {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn table(client: &kube::Client, path: &str) -> Value {
    let req = http::Request::get(path)
        .header("Accept", TABLE)
        .body(Vec::new())
        .unwrap();
    serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap()
}

fn column_names(t: &Value) -> Vec<&str> {
    t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn csi_drivers_are_defaulted_validated_and_printed() {
    let srv = TestApiServer::start().await.unwrap();
    let drivers: Api<CSIDriver> = Api::all(srv.client.clone());
    let created = drivers
        .create(
            &PostParams::default(),
            &from(json!({
                "metadata": {"name": "hostpath.csi.k8s.io"},
                "spec": {"tokenRequests": [{"audience": "vault"}]},
            })),
        )
        .await
        .unwrap();
    let spec = serde_json::to_value(&created.spec).unwrap();
    assert_eq!(spec["attachRequired"], true);
    assert_eq!(spec["podInfoOnMount"], false);
    assert_eq!(spec["storageCapacity"], false);
    assert_eq!(spec["requiresRepublish"], false);
    assert_eq!(spec["fsGroupPolicy"], "ReadWriteOnceWithFSType");
    assert_eq!(spec["volumeLifecycleModes"], json!(["Persistent"]));

    let t = table(
        &srv.client,
        "/apis/storage.k8s.io/v1/csidrivers/hostpath.csi.k8s.io",
    )
    .await;
    assert_eq!(
        column_names(&t),
        [
            "Name",
            "AttachRequired",
            "PodInfoOnMount",
            "StorageCapacity",
            "TokenRequests",
            "RequiresRepublish",
            "Modes",
            "Age"
        ]
    );
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[0], "hostpath.csi.k8s.io");
    assert_eq!(cells[1], true);
    assert_eq!(cells[4], "vault");
    assert_eq!(cells[6], "Persistent");

    // attachRequired may not change once set (upstream names it
    // `spec.attachedRequired` in this error).
    let (code, msg) = refusal(
        drivers
            .patch(
                "hostpath.csi.k8s.io",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"attachRequired": false}})),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(
        msg.contains("spec.attachedRequired: Invalid value: false: field is immutable"),
        "{msg}"
    );
    // An unknown lifecycle mode.
    let (code, msg) = refusal(
        drivers
            .create(
                &PostParams::default(),
                &from(json!({
                    "metadata": {"name": "other.csi.k8s.io"},
                    "spec": {"volumeLifecycleModes": ["Sometimes"]},
                })),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("spec.volumeLifecycleModes"), "{msg}");
}

#[tokio::test]
async fn volume_attachments_keep_spec_and_status_apart() {
    let srv = TestApiServer::start().await.unwrap();
    let attachments: Api<VolumeAttachment> = Api::all(srv.client.clone());
    // A status sent on create is dropped: only the attacher sets it.
    let created = attachments
        .create(
            &PostParams::default(),
            &from(json!({
                "metadata": {"name": "csi-0123"},
                "spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": "node-1",
                    "source": {"persistentVolumeName": "pv-1"}},
                "status": {"attached": true},
            })),
        )
        .await
        .unwrap();
    assert_eq!(created.status.as_ref().map(|s| s.attached), Some(false));

    let attached = attachments
        .patch_status(
            "csi-0123",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"attached": true,
                "attachmentMetadata": {"devicePath": "/dev/vdb"}}})),
        )
        .await
        .unwrap();
    assert_eq!(attached.status.as_ref().map(|s| s.attached), Some(true));

    // The spec is immutable.
    let (code, msg) = refusal(
        attachments
            .patch(
                "csi-0123",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"nodeName": "node-2"}})),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("spec"), "{msg}");
    // Exactly one source.
    let (code, msg) = refusal(
        attachments
            .create(
                &PostParams::default(),
                &from(json!({
                    "metadata": {"name": "csi-no-source"},
                    "spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": "node-1",
                        "source": {}},
                })),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");

    let t = table(&srv.client, "/apis/storage.k8s.io/v1/volumeattachments").await;
    assert_eq!(
        column_names(&t),
        ["Name", "Attacher", "PV", "Node", "Attached", "Age"]
    );
    let cells = &t["rows"][0]["cells"];
    assert_eq!(
        cells.as_array().unwrap()[..5],
        [
            json!("csi-0123"),
            json!("hostpath.csi.k8s.io"),
            json!("pv-1"),
            json!("node-1"),
            json!(true)
        ]
    );
}

#[tokio::test]
async fn csi_nodes_and_storage_capacities_are_served() {
    let srv = TestApiServer::start().await.unwrap();
    let nodes: Api<CSINode> = Api::all(srv.client.clone());
    nodes
        .create(
            &PostParams::default(),
            &from(json!({
                "metadata": {"name": "node-1"},
                "spec": {"drivers": [{"name": "hostpath.csi.k8s.io", "nodeID": "node-1",
                    "topologyKeys": ["topology.hostpath.csi/node"],
                    "allocatable": {"count": 8}}]},
            })),
        )
        .await
        .unwrap();
    let (code, msg) = refusal(
        nodes
            .create(
                &PostParams::default(),
                &from(json!({
                    "metadata": {"name": "node-2"},
                    "spec": {"drivers": [
                        {"name": "hostpath.csi.k8s.io", "nodeID": "a"},
                        {"name": "hostpath.csi.k8s.io", "nodeID": "b"}]},
                })),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("spec.drivers[1].name"), "{msg}");
    let t = table(&srv.client, "/apis/storage.k8s.io/v1/csinodes/node-1").await;
    assert_eq!(column_names(&t), ["Name", "Drivers", "Age"]);
    assert_eq!(t["rows"][0]["cells"][1], 1);

    let capacities: Api<CSIStorageCapacity> = Api::namespaced(srv.client.clone(), "default");
    capacities
        .create(
            &PostParams::default(),
            &from(json!({
                "metadata": {"name": "csisc-1"},
                "storageClassName": "fast",
                "capacity": "10Gi",
                "nodeTopology": {"matchLabels": {"topology.hostpath.csi/node": "node-1"}},
            })),
        )
        .await
        .unwrap();
    let (code, msg) = refusal(
        capacities
            .patch(
                "csisc-1",
                &PatchParams::default(),
                &Patch::Merge(json!({"storageClassName": "slow"})),
            )
            .await,
    );
    assert_eq!(code, 422, "{msg}");
    assert!(msg.contains("storageClassName"), "{msg}");
    let listed = capacities.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let t = table(
        &srv.client,
        "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities",
    )
    .await;
    assert_eq!(column_names(&t), ["Name", "StorageClassName", "Capacity"]);
    assert_eq!(t["rows"][0]["cells"][2], "10Gi");

    // Discovery lists all four.
    let req = http::Request::get("/apis/storage.k8s.io/v1")
        .body(Vec::new())
        .unwrap();
    let list: Value = serde_json::from_str(&srv.client.request_text(req).await.unwrap()).unwrap();
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for want in [
        "csidrivers",
        "csinodes",
        "csistoragecapacities",
        "volumeattachments",
        "volumeattachments/status",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
}
