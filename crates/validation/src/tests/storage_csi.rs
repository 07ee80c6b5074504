//! CSIDriver, CSINode, CSIStorageCapacity and VolumeAttachment: defaults, create and
//! update rules, after upstream's `pkg/apis/storage/validation` tests.

use ferrokube_api::defaults::ApplyDefaults;
use k8s_openapi::Resource;
use k8s_openapi::api::storage::v1 as storage;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{assert_errors, check_create, check_update, object, with};
use crate::Validate;

const DRIVER: &str = "io.kubernetes.storage.csi.driver";

/// The object after defaulting twice (defaulting is idempotent), as JSON without
/// apiVersion and kind.
fn defaulted<T>(mut v: Value) -> Value
where
    T: Resource + ApplyDefaults + DeserializeOwned + Serialize,
{
    let o = v.as_object_mut().expect("object");
    o.insert("apiVersion".into(), T::API_VERSION.into());
    o.insert("kind".into(), T::KIND.into());
    let mut obj: T = serde_json::from_value(v).expect("fixture deserializes");
    obj.apply_defaults();
    obj.apply_defaults();
    let mut out = serde_json::to_value(&obj).expect("serializes");
    let o = out.as_object_mut().expect("object");
    o.remove("apiVersion");
    o.remove("kind");
    out
}

#[test]
fn csi_defaults() {
    assert_eq!(
        defaulted::<storage::CSIDriver>(json!({"metadata": {}, "spec": {}}))["spec"],
        json!({"attachRequired": true, "podInfoOnMount": false, "storageCapacity": false,
            "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"],
            "requiresRepublish": false, "seLinuxMount": false}),
    );
    let explicit = json!({"attachRequired": false, "podInfoOnMount": true, "storageCapacity": true,
        "fsGroupPolicy": "", "volumeLifecycleModes": ["Ephemeral"], "requiresRepublish": true,
        "seLinuxMount": true, "tokenRequests": [{"audience": "a"}]});
    assert_eq!(
        defaulted::<storage::CSIDriver>(json!({"metadata": {}, "spec": explicit.clone()}))["spec"],
        explicit,
    );
    assert_eq!(
        defaulted::<storage::CSIDriver>(
            json!({"metadata": {}, "spec": {"volumeLifecycleModes": []}})
        )["spec"]["volumeLifecycleModes"],
        json!(["Persistent"]),
    );
    let node = json!({"metadata": {}, "spec": {"drivers": [{"name": "d", "nodeID": "n"}]}});
    assert_eq!(defaulted::<storage::CSINode>(node.clone()), node);
    let capacity = json!({"metadata": {}, "storageClassName": "sc"});
    assert_eq!(
        defaulted::<storage::CSIStorageCapacity>(capacity.clone()),
        capacity
    );
    let va = |source: Value| json!({"metadata": {}, "spec": {"attacher": DRIVER, "nodeName": "n", "source": source}});
    assert_eq!(
        defaulted::<storage::VolumeAttachment>(va(json!({"persistentVolumeName": "pv"})))["spec"],
        va(json!({"persistentVolumeName": "pv"}))["spec"],
    );
    let inline = defaulted::<storage::VolumeAttachment>(va(json!({"inlineVolumeSpec": {
        "hostPath": {"path": "/p"},
        "rbd": {"monitors": ["m"], "image": "i"},
        "iscsi": {"targetPortal": "t", "iqn": "q", "lun": 0},
        "azureDisk": {"diskName": "d", "diskURI": "u"},
        "scaleIO": {"gateway": "g", "system": "s", "secretRef": {"name": "x"}}}})));
    let spec = &inline["spec"]["source"]["inlineVolumeSpec"];
    assert_eq!(spec["hostPath"]["type"], json!(""));
    assert_eq!(
        (
            &spec["rbd"]["pool"],
            &spec["rbd"]["user"],
            &spec["rbd"]["keyring"]
        ),
        (&json!("rbd"), &json!("admin"), &json!("/etc/ceph/keyring")),
    );
    assert_eq!(spec["iscsi"]["iscsiInterface"], json!("default"));
    assert_eq!(spec["azureDisk"]["cachingMode"], json!("ReadWrite"));
    assert_eq!(spec["scaleIO"]["storageMode"], json!("ThinProvisioned"));
    // Not the PersistentVolume object's own defaults.
    assert!(
        spec.get("persistentVolumeReclaimPolicy").is_none() && spec.get("volumeMode").is_none()
    );
}

#[test]
fn csi_driver() {
    let spec = |s: Value| json!({"spec": s});
    check_create::<storage::CSIDriver>(vec![
        ("defaults only", spec(json!({})), vec![]),
        (
            "everything set",
            spec(
                json!({"attachRequired": false, "podInfoOnMount": true, "storageCapacity": true,
                "fsGroupPolicy": "File", "volumeLifecycleModes": ["Persistent", "Ephemeral"],
                "requiresRepublish": true, "seLinuxMount": true, "nodeAllocatableUpdatePeriodSeconds": 10,
                "tokenRequests": [{"audience": "a", "expirationSeconds": 600}, {"audience": ""},
                    {"audience": "b", "expirationSeconds": 4294967296_i64}]}),
            ),
            vec![],
        ),
        (
            "fsGroupPolicy",
            spec(json!({"fsGroupPolicy": "Bogus"})),
            vec![
                "spec.fsGroupPolicy: Unsupported value: \"Bogus\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\"",
            ],
        ),
        (
            "explicit empty fsGroupPolicy is not defaulted",
            spec(json!({"fsGroupPolicy": ""})),
            vec!["spec.fsGroupPolicy: Unsupported value"],
        ),
        (
            "volumeLifecycleModes",
            spec(json!({"volumeLifecycleModes": ["Persistent", "Foo", "ephemeral"]})),
            vec![
                "spec.volumeLifecycleModes: Unsupported value: \"Foo\": supported values: \"Persistent\", \"Ephemeral\"",
                "spec.volumeLifecycleModes: Unsupported value: \"ephemeral\": supported values: \"Persistent\", \"Ephemeral\"",
            ],
        ),
        (
            "tokenRequests",
            spec(json!({"tokenRequests": [
                {"audience": "a", "expirationSeconds": 599},
                {"audience": "a", "expirationSeconds": 1},
                {"audience": "b", "expirationSeconds": 4294967297_i64},
                {"audience": ""}, {"audience": ""}]})),
            vec![
                "spec.tokenRequests[0].expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes",
                "spec.tokenRequests[1].audience: Duplicate value: \"a\"",
                "spec.tokenRequests[2].expirationSeconds: Invalid value: 4294967297: may not specify a duration larger than 2^32 seconds",
                "spec.tokenRequests[4].audience: Duplicate value: \"\"",
            ],
        ),
        (
            "nodeAllocatableUpdatePeriodSeconds",
            spec(json!({"nodeAllocatableUpdatePeriodSeconds": 9})),
            vec![
                "spec.nodeAllocatableUpdatePeriodSeconds: Invalid value: 9: must be greater than or equal to 10 seconds",
            ],
        ),
    ]);
    // Undefaulted, the booleans are required (attachRequired under upstream's
    // misspelt path).
    assert_errors(
        "undefaulted",
        &storage::CSIDriver::default().validate_create(),
        &[
            "spec.attachedRequired: Required value",
            "spec.podInfoOnMount: Required value",
            "spec.storageCapacity: Required value",
            "spec.seLinuxMount: Required value",
        ],
    );

    let base = spec(json!({}));
    check_update::<storage::CSIDriver>(vec![
        ("unchanged", base.clone(), base.clone(), vec![]),
        (
            "mutable fields",
            spec(
                json!({"podInfoOnMount": true, "fsGroupPolicy": "None", "storageCapacity": true,
                "requiresRepublish": true, "seLinuxMount": true, "tokenRequests": [{"audience": "a"}],
                "nodeAllocatableUpdatePeriodSeconds": 60}),
            ),
            base.clone(),
            vec![],
        ),
        (
            "defaulted lifecycle modes equal explicit ones",
            spec(json!({"volumeLifecycleModes": ["Persistent"]})),
            base.clone(),
            vec![],
        ),
        (
            "attachRequired",
            spec(json!({"attachRequired": false})),
            base.clone(),
            vec!["spec.attachedRequired: Invalid value: false: field is immutable"],
        ),
        (
            "volumeLifecycleModes",
            spec(json!({"volumeLifecycleModes": ["Persistent", "Ephemeral"]})),
            base.clone(),
            vec!["spec.volumeLifecycleModes: Invalid value"],
        ),
        (
            "spec rules re-run",
            spec(json!({"fsGroupPolicy": "Bogus"})),
            base,
            vec!["spec.fsGroupPolicy: Unsupported value"],
        ),
    ]);
}

fn node(drivers: Value) -> Value {
    json!({"spec": {"drivers": drivers}})
}

fn driver(name: &str, id: &str) -> Value {
    json!({"name": name, "nodeID": id})
}

#[test]
fn csi_node() {
    check_create::<storage::CSINode>(vec![
        ("no drivers", node(json!([])), vec![]),
        (
            "valid",
            node(json!([
                {"name": DRIVER, "nodeID": "node-1", "allocatable": {"count": 0},
                    "topologyKeys": ["company.com/zone1", "company.com/zone2"]},
                {"name": "IO.Kubernetes.Storage.CSI.Other", "nodeID": "x".repeat(256)}])),
            vec![],
        ),
        (
            "driver name",
            node(json!([
                driver("$csi-driver@", "n"),
                driver(&"a".repeat(64), "n")
            ])),
            vec![
                "spec.drivers[0].name: Invalid value",
                "spec.drivers[1].name: Too long: may not be more than 63 bytes",
            ],
        ),
        (
            "empty driver name",
            node(json!([driver("", "n")])),
            vec![
                "spec.drivers[0].name: Required value",
                "spec.drivers[0].name: Invalid value",
            ],
        ),
        (
            "nodeID",
            node(json!([driver("a", ""), driver("b", &"x".repeat(257))])),
            vec![
                "spec.drivers[0].nodeID: Required value",
                "spec.drivers[1].nodeID: Invalid value",
            ],
        ),
        (
            "negative allocatable count",
            node(json!([{"name": "a", "nodeID": "n", "allocatable": {"count": -1}}])),
            vec![
                "spec.drivers[0].allocatable.count: Invalid value: -1: must be greater than or equal to 0",
            ],
        ),
        (
            "duplicate driver",
            node(json!([
                driver("a", "n"),
                driver("b", "n"),
                driver("a", "m")
            ])),
            vec!["spec.drivers[2].name: Duplicate value: \"a\""],
        ),
        (
            "topology keys on the driver's path",
            node(json!([{"name": "a", "nodeID": "n",
                "topologyKeys": ["k", "k", "bad key!", "company.com/zone"]}])),
            vec![
                "spec.drivers[0]: Duplicate value: \"k\"",
                "spec.drivers[0]: Invalid value",
            ],
        ),
        (
            "empty topology key",
            node(json!([{"name": "a", "nodeID": "n", "topologyKeys": [""]}])),
            vec![
                "spec.drivers[0]: Required value",
                "spec.drivers[0]: Invalid value",
                "spec.drivers[0]: Invalid value",
            ],
        ),
    ]);

    let old =
        node(json!([driver("a", "n"), {"name": "b", "nodeID": "n", "allocatable": {"count": 1}}]));
    check_update::<storage::CSINode>(vec![
        ("unchanged", old.clone(), old.clone(), vec![]),
        (
            "drivers added and removed",
            node(json!([driver("a", "n"), driver("c", "n")])),
            old.clone(),
            vec![],
        ),
        (
            "empty topology keys equal none",
            node(json!([{"name": "a", "nodeID": "n", "topologyKeys": []},
                {"name": "b", "nodeID": "n", "allocatable": {"count": 1}}])),
            old.clone(),
            vec![],
        ),
        (
            "nodeID",
            node(
                json!([driver("a", "m"), {"name": "b", "nodeID": "n", "allocatable": {"count": 1}}]),
            ),
            old.clone(),
            vec!["spec.drivers: Invalid value"],
        ),
        (
            "allocatable (MutableCSINodeAllocatableCount off in 1.33)",
            node(
                json!([driver("a", "n"), {"name": "b", "nodeID": "n", "allocatable": {"count": 2}}]),
            ),
            old.clone(),
            vec!["spec.drivers: Invalid value"],
        ),
        (
            "topology keys",
            node(
                json!([{"name": "a", "nodeID": "n", "topologyKeys": ["zone"]},
                {"name": "b", "nodeID": "n", "allocatable": {"count": 1}}]),
            ),
            old.clone(),
            vec!["spec.drivers: Invalid value"],
        ),
        (
            "create rules re-run",
            node(json!([driver("a", "n"), driver("a", "n")])),
            node(json!([driver("a", "n")])),
            vec!["spec.drivers[1].name: Duplicate value: \"a\""],
        ),
    ]);
    let errs = object::<storage::CSINode>(node(json!([driver("a", "m")])))
        .validate_update(&object(node(json!([driver("a", "n")]))));
    assert_eq!(
        errs[0].to_string(),
        "spec.drivers: Invalid value: {\"name\":\"a\",\"nodeID\":\"m\"}: field is immutable"
    );
}

fn capacity(extra: Value) -> Value {
    let mut v = json!({"storageClassName": "sc"});
    v.as_object_mut()
        .expect("object")
        .extend(extra.as_object().expect("object").clone());
    v
}

#[test]
fn csi_storage_capacity() {
    let zone = json!({"matchLabels": {"topology.kubernetes.io/zone": "a"}});
    check_create::<storage::CSIStorageCapacity>(vec![
        ("minimal", capacity(json!({})), vec![]),
        (
            "valid",
            capacity(json!({"nodeTopology": zone, "capacity": "1Gi", "maximumVolumeSize": "0"})),
            vec![],
        ),
        (
            "maximumVolumeSize sign is not checked",
            capacity(json!({"maximumVolumeSize": "-1"})),
            vec![],
        ),
        (
            "empty storageClassName",
            json!({"storageClassName": ""}),
            vec!["storageClassName: Invalid value"],
        ),
        (
            "bad storageClassName",
            json!({"storageClassName": "Bad_Class"}),
            vec!["storageClassName: Invalid value"],
        ),
        (
            "negative capacity",
            capacity(json!({"capacity": "-1"})),
            vec!["capacity: Invalid value: \"-1\": must be greater than or equal to 0"],
        ),
        (
            "malformed quantities",
            capacity(json!({"capacity": "abc", "maximumVolumeSize": "1Xi"})),
            vec![
                "capacity: Invalid value",
                "maximumVolumeSize: Invalid value",
            ],
        ),
        (
            "selector",
            capacity(json!({"nodeTopology": {"matchExpressions": [
                {"key": "k", "operator": "In", "values": ["bad value!"]},
                {"key": "k", "operator": "Bogus"}]}})),
            vec![
                "nodeTopology.matchExpressions[0].values[0]: Invalid value",
                "nodeTopology.matchExpressions[1].operator: Invalid value: \"Bogus\": not a valid selector operator",
            ],
        ),
    ]);

    let old = capacity(json!({"nodeTopology": zone, "capacity": "1Gi"}));
    let bad_value =
        json!({"matchExpressions": [{"key": "k", "operator": "In", "values": ["bad value!"]}]});
    check_update::<storage::CSIStorageCapacity>(vec![
        ("unchanged", old.clone(), old.clone(), vec![]),
        (
            "capacity and maximumVolumeSize are mutable",
            capacity(json!({"nodeTopology": zone, "capacity": "2Gi", "maximumVolumeSize": "1Gi"})),
            old.clone(),
            vec![],
        ),
        (
            "storageClassName",
            json!({"storageClassName": "other", "nodeTopology": zone, "capacity": "1Gi"}),
            old.clone(),
            vec!["storageClassName: Invalid value: \"other\": field is immutable"],
        ),
        (
            "nodeTopology",
            capacity(
                json!({"nodeTopology": {"matchLabels": {"topology.kubernetes.io/zone": "b"}},
                "capacity": "1Gi"}),
            ),
            old.clone(),
            vec!["nodeTopology: Invalid value"],
        ),
        (
            "an empty selector is not an absent one",
            capacity(json!({"nodeTopology": {}})),
            capacity(json!({})),
            vec!["nodeTopology: Invalid value: {}: field is immutable"],
        ),
        (
            "empty matchLabels equal none",
            capacity(json!({"nodeTopology": {"matchLabels": {}}})),
            capacity(json!({"nodeTopology": {}})),
            vec![],
        ),
        (
            "invalid label values kept when already there",
            capacity(json!({"nodeTopology": bad_value, "capacity": "2Gi"})),
            capacity(json!({"nodeTopology": bad_value})),
            vec![],
        ),
        (
            "invalid label values refused when new",
            capacity(json!({"nodeTopology": bad_value})),
            capacity(json!({})),
            vec![
                "nodeTopology.matchExpressions[0].values[0]: Invalid value",
                "nodeTopology: Invalid value",
            ],
        ),
    ]);
}

fn attachment(source: Value) -> Value {
    json!({"spec": {"attacher": DRIVER, "nodeName": "node-1", "source": source}})
}

fn inline(spec: Value) -> Value {
    attachment(json!({"inlineVolumeSpec": spec}))
}

fn csi_source() -> Value {
    json!({"driver": "com.test.foo", "volumeHandle": "foobar"})
}

#[test]
fn volume_attachment_create() {
    let pv = attachment(json!({"persistentVolumeName": "pv-1"}));
    check_create::<storage::VolumeAttachment>(vec![
        ("persistent volume", pv.clone(), vec![]),
        (
            "inline",
            inline(
                json!({"accessModes": ["ReadWriteOnce"], "csi": csi_source(),
                "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem"}),
            ),
            vec![],
        ),
        (
            "status",
            with(
                pv.clone(),
                &["status"],
                json!({"attached": true, "attachmentMetadata": {"a": "b"},
                    "attachError": {"message": "m", "errorCode": 5}, "detachError": {"message": "x".repeat(1024)}}),
            ),
            vec![],
        ),
        (
            "empty attacher (required twice, as upstream)",
            with(pv.clone(), &["spec", "attacher"], json!("")),
            vec![
                "spec.attacher: Required value",
                "spec.attacher: Required value",
                "spec.attacher: Invalid value",
            ],
        ),
        (
            "attacher",
            with(pv.clone(), &["spec", "attacher"], json!("bad attacher!")),
            vec!["spec.attacher: Invalid value"],
        ),
        (
            "long attacher",
            with(pv.clone(), &["spec", "attacher"], json!("a".repeat(64))),
            vec!["spec.attacher: Too long: may not be more than 63 bytes"],
        ),
        (
            "nodeName",
            with(pv.clone(), &["spec", "nodeName"], json!("")),
            vec!["spec.nodeName: Invalid value"],
        ),
        (
            "no source",
            attachment(json!({})),
            vec![
                "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            ],
        ),
        (
            "both sources",
            attachment(json!({"persistentVolumeName": "pv",
                "inlineVolumeSpec": {"accessModes": ["ReadWriteOnce"], "csi": csi_source()}})),
            vec![
                "spec.source: Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            ],
        ),
        (
            "empty persistentVolumeName",
            attachment(json!({"persistentVolumeName": ""})),
            vec![
                "spec.source.persistentVolumeName: Required value: must specify non empty persistentVolumeName",
                "spec.source.persistentVolumeName: Invalid value",
            ],
        ),
        (
            "persistentVolumeName",
            attachment(json!({"persistentVolumeName": "Bad_PV"})),
            vec!["spec.source.persistentVolumeName: Invalid value"],
        ),
        (
            "inline spec restrictions",
            inline(
                json!({"capacity": {"storage": "1Gi"}, "claimRef": {"name": "c"}, "nodeAffinity": {},
                "storageClassName": "sc", "volumeMode": "Block", "persistentVolumeReclaimPolicy": "Delete",
                "accessModes": ["ReadWriteOncePod", "ReadWriteOnce", "Bogus"],
                "hostPath": {"path": "/"}, "csi": {"driver": "", "volumeHandle": ""}}),
            ),
            vec![
                "spec.source.inlineVolumeSpec.claimRef: Forbidden: may not be specified in the context of inline volumes",
                "spec.source.inlineVolumeSpec.capacity: Forbidden: may not be specified in the context of inline volumes",
                "spec.source.inlineVolumeSpec.accessModes: Unsupported value: \"Bogus\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"",
                "spec.source.inlineVolumeSpec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
                "spec.source.inlineVolumeSpec.persistentVolumeReclaimPolicy: Forbidden: may only be Retain in the context of inline volumes",
                "spec.source.inlineVolumeSpec.nodeAffinity: Forbidden: may not be specified in the context of inline volumes",
                "spec.source.inlineVolumeSpec.csi: Forbidden: may not specify more than 1 volume type",
                "spec.source.inlineVolumeSpec.storageClassName: Forbidden: may not be specified in the context of inline volumes",
                "spec.source.inlineVolumeSpec.volumeMode: Forbidden: may not specify volumeMode other than Filesystem in the context of inline volumes",
            ],
        ),
        (
            "inline csi source",
            inline(
                json!({"accessModes": ["ReadWriteOnce"], "csi": {"driver": "", "volumeHandle": "",
                "nodePublishSecretRef": {"namespace": "Bad_NS"},
                "controllerPublishSecretRef": {"name": "Bad_Name", "namespace": "ns"},
                "nodeExpandSecretRef": {"name": "s"},
                "nodeStageSecretRef": {"name": "Not_Checked"}}}),
            ),
            vec![
                "spec.source.inlineVolumeSpec.csi.driver: Required value",
                "spec.source.inlineVolumeSpec.csi.driver: Invalid value",
                "spec.source.inlineVolumeSpec.csi.volumeHandle: Required value",
                "spec.source.inlineVolumeSpec.csi.controllerPublishSecretRef.name: Invalid value",
                "spec.source.inlineVolumeSpec.csi.nodePublishSecretRef.name: Required value",
                "spec.source.inlineVolumeSpec.csi.nodePublishSecretRef.namespace: Invalid value",
                "spec.source.inlineVolumeSpec.csi.nodeExpandSecretRef.namespace: Required value",
            ],
        ),
        (
            "inline without a source",
            inline(json!({})),
            vec![
                "spec.source.inlineVolumeSpec.csi: Required value: has to be specified in the context of inline volumes",
                "spec.source.inlineVolumeSpec.accessModes: Required value",
                "spec.source.inlineVolumeSpec: Required value: must specify a volume type",
            ],
        ),
        (
            "inline local volume",
            inline(json!({"accessModes": ["ReadWriteOnce"], "local": {"path": "/x"}})),
            vec![
                "spec.source.inlineVolumeSpec.csi: Required value",
                "spec.source.inlineVolumeSpec.nodeAffinity: Required value: Local volume requires node affinity",
            ],
        ),
        (
            "flexVolume is counted but not refused",
            inline(
                json!({"accessModes": ["ReadWriteOnce"], "flexVolume": {"driver": "f"}, "csi": csi_source()}),
            ),
            vec![
                "spec.source.inlineVolumeSpec.csi: Forbidden: may not specify more than 1 volume type",
            ],
        ),
        (
            "recycled root hostPath",
            inline(
                json!({"accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/a/.."},
                "persistentVolumeReclaimPolicy": "Recycle"}),
            ),
            vec![
                "spec.source.inlineVolumeSpec.csi: Required value",
                "spec.source.inlineVolumeSpec.persistentVolumeReclaimPolicy: Forbidden: may only be Retain in the context of inline volumes",
                "spec.source.inlineVolumeSpec.persistentVolumeReclaimPolicy: Forbidden: may not be 'recycle' for a hostPath mount of '/'",
            ],
        ),
        (
            "status limits",
            with(
                pv.clone(),
                &["status"],
                json!({"attached": false, "attachmentMetadata": {"k": "v".repeat(256 * 1024)},
                    "attachError": {"message": "x".repeat(1025)}, "detachError": {"errorCode": -1}}),
            ),
            vec![
                "status.attachmentMetadata: Too long: may not be more than 262144 bytes",
                "status.attachError.message: Too long: may not be more than 262144 bytes",
                "status.detachError.errorCode: Invalid value: -1: must be between 0 and 2147483647, inclusive",
            ],
        ),
    ]);
}

#[test]
fn volume_attachment_update() {
    let pv = attachment(json!({"persistentVolumeName": "pv-1"}));
    let status = |s: Value| with(pv.clone(), &["status"], s);
    check_update::<storage::VolumeAttachment>(vec![
        ("unchanged", pv.clone(), pv.clone(), vec![]),
        (
            "status written (status subresource)",
            status(json!({"attached": true, "attachmentMetadata": {"a": "b"}})),
            status(json!({"attached": false})),
            vec![],
        ),
        (
            "status re-validated",
            status(json!({"attached": false, "attachError": {"message": "m", "errorCode": -2}})),
            pv.clone(),
            vec!["status.attachError.errorCode: Invalid value"],
        ),
        (
            "spec is read-only",
            with(pv.clone(), &["spec", "nodeName"], json!("node-2")),
            pv.clone(),
            vec!["spec: Invalid value"],
        ),
        (
            "source switched",
            inline(json!({"accessModes": ["ReadWriteOnce"], "csi": csi_source()})),
            pv.clone(),
            vec!["spec: Invalid value"],
        ),
        (
            "the v1 create-only checks are not re-run",
            attachment(json!({"persistentVolumeName": "Bad_PV"})),
            attachment(json!({"persistentVolumeName": "Bad_PV"})),
            vec![],
        ),
        (
            "empty attacher kept: required once",
            with(pv.clone(), &["spec", "attacher"], json!("")),
            with(pv.clone(), &["spec", "attacher"], json!("")),
            vec!["spec.attacher: Required value"],
        ),
    ]);
    let errs =
        object::<storage::VolumeAttachment>(with(pv.clone(), &["spec", "nodeName"], json!("n2")))
            .validate_update(&object(pv));
    assert!(
        errs[0].to_string().ends_with(": field is immutable") && errs[0].field == "spec",
        "{errs:?}"
    );
}
