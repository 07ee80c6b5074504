//! storage.k8s.io/v1 CSI kinds, after upstream 1.33 `pkg/apis/storage/validation`
//! (`ValidateCSIDriver[Update]`, `ValidateCSINode[Update]`,
//! `ValidateCSIStorageCapacity[Update]`, `ValidateVolumeAttachment[V1|Update]`) and
//! the registry strategies that pick their options.
//!
//! Feature gates at their 1.33 defaults: `SELinuxMountReadWriteOncePod` on (so
//! `spec.seLinuxMount` is required after defaulting), `MutableCSINodeAllocatableCount`
//! off (a CSINode driver entry is immutable as a whole). The status subresource of a
//! VolumeAttachment goes through the same `validate_update` as the main resource, as
//! upstream's status strategy inherits `ValidateUpdate`: the spec (copied from the old
//! object by the status strategy) must be unchanged, the status is re-validated.

use std::collections::BTreeSet;

use ferrokube_apimachinery::errors::{FieldError, FieldErrorKind, FieldPath};
use ferrokube_apimachinery::validation::{
    FIELD_IMMUTABLE_ERROR_MSG, inclusive_range_error, is_dns1123_subdomain, name_is_dns_subdomain,
    validate_nonnegative_field,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use serde::Serialize;
use serde_json::Value;

use crate::Validate;
use crate::util::*;

/// `csiNodeIDLongerMaxLength`: the 1.33 strategy validates with `AllowLongNodeID`
/// on create and update.
const CSI_NODE_ID_MAX_LENGTH: usize = 256;
/// `maxAttachedVolumeMetadataSize`.
const MAX_ATTACHED_VOLUME_METADATA_SIZE: usize = 256 * 1024;
/// `maxVolumeErrorMessageSize`.
const MAX_VOLUME_ERROR_MESSAGE_SIZE: usize = 1024;
/// `supportedFSGroupPolicy.List()` (sorted).
const FS_GROUP_POLICIES: &[&str] = &["File", "None", "ReadWriteOnceWithFSType"];
const VOLUME_LIFECYCLE_MODES: &[&str] = &["Persistent", "Ephemeral"];
/// `supportedAccessModes` of core validation, sorted.
const PV_ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const INLINE_FORBIDDEN: &str = "may not be specified in the context of inline volumes";
const EXACTLY_ONE_SOURCE: &str =
    "must specify exactly one of inlineVolumeSpec and persistentVolumeName";

/// `ValidateCSIDriverName` of core validation: CSINode driver names, a
/// VolumeAttachment's attacher, a CSI volume source's driver.
fn csi_driver_name(name: &str, path: &FieldPath, errs: &mut Errs) {
    if name.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    if name.len() > 63 {
        errs.push(FieldError::too_long(path, Some(63)));
    }
    msgs_invalid(is_dns1123_subdomain(&name.to_lowercase()), name, path, errs);
}

/// The JSON form `apiequality.Semantic.DeepEqual` effectively compares: nil and empty
/// lists and maps are alike. The compared value itself is kept even when empty (an
/// empty `nodeTopology` selector is not an absent one); below it, a pointer to an empty
/// struct is folded in with the empty maps, as JSON cannot tell them apart.
fn semantic<T: Serialize>(v: &T) -> Value {
    fn prune(v: Value) -> Option<Value> {
        match v {
            Value::Null => None,
            Value::Array(a) => {
                let a: Vec<Value> = a
                    .into_iter()
                    .map(|e| prune(e).unwrap_or(Value::Null))
                    .collect();
                (!a.is_empty()).then_some(Value::Array(a))
            }
            Value::Object(o) => {
                let o: serde_json::Map<String, Value> = o
                    .into_iter()
                    .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                    .collect();
                (!o.is_empty()).then_some(Value::Object(o))
            }
            other => Some(other),
        }
    }
    match json(v) {
        Value::Object(o) => Value::Object(
            o.into_iter()
                .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                .collect(),
        ),
        other => prune(other).unwrap_or(Value::Null),
    }
}

/// `ValidateImmutableField` with upstream's semantic equality.
fn immutable_semantic<T: Serialize>(new: &T, old: &T, path: &FieldPath, errs: &mut Errs) {
    if semantic(new) != semantic(old) {
        errs.push(FieldError::invalid(
            path,
            json(new),
            FIELD_IMMUTABLE_ERROR_MSG,
        ));
    }
}

// --- CSIDriver -------------------------------------------------------------------

fn required_bool(v: Option<bool>, path: &FieldPath, errs: &mut Errs) {
    if v.is_none() {
        errs.push(FieldError::required(path, ""));
    }
}

/// `validateCSIDriverSpec`. Upstream spells the attachRequired path
/// `spec.attachedRequired`, here too.
fn validate_csi_driver_spec(spec: &storage::CSIDriverSpec, errs: &mut Errs) {
    let sp = p("spec");
    required_bool(spec.attach_required, &sp.child("attachedRequired"), errs);
    required_bool(spec.pod_info_on_mount, &sp.child("podInfoOnMount"), errs);
    required_bool(spec.storage_capacity, &sp.child("storageCapacity"), errs);
    enum_optional(
        &spec.fs_group_policy,
        FS_GROUP_POLICIES,
        &sp.child("fsGroupPolicy"),
        errs,
    );
    let mut audiences = BTreeSet::new();
    for (i, tr) in spec.token_requests.iter().flatten().enumerate() {
        let tp = sp.child("tokenRequests").index(i);
        if !audiences.insert(tr.audience.as_str()) {
            errs.push(FieldError::duplicate(
                &tp.child("audience"),
                tr.audience.as_str(),
            ));
            continue;
        }
        let Some(secs) = tr.expiration_seconds else {
            continue;
        };
        if secs < 10 * 60 {
            errs.push(FieldError::invalid(
                &tp.child("expirationSeconds"),
                secs,
                "may not specify a duration less than 10 minutes",
            ));
        }
        if secs > 1 << 32 {
            errs.push(FieldError::invalid(
                &tp.child("expirationSeconds"),
                secs,
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
    }
    for mode in spec.volume_lifecycle_modes.iter().flatten() {
        if !VOLUME_LIFECYCLE_MODES.contains(&mode.as_str()) {
            errs.push(FieldError::not_supported(
                &sp.child("volumeLifecycleModes"),
                mode.as_str(),
                VOLUME_LIFECYCLE_MODES,
            ));
        }
    }
    // SELinuxMountReadWriteOncePod is on by default in 1.33.
    required_bool(spec.se_linux_mount, &sp.child("seLinuxMount"), errs);
    if let Some(period) = spec.node_allocatable_update_period_seconds
        && period < 10
    {
        errs.push(FieldError::invalid(
            &sp.child("nodeAllocatableUpdatePeriodSeconds"),
            period,
            "must be greater than or equal to 10 seconds",
        ));
    }
}

/// The driver's name is `metadata.name` (a DNS subdomain), checked by the registry.
impl Validate for storage::CSIDriver {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_csi_driver_spec(&self.spec, &mut errs);
        errs
    }
    /// podInfoOnMount, fsGroupPolicy, storageCapacity, tokenRequests,
    /// requiresRepublish, seLinuxMount and nodeAllocatableUpdatePeriodSeconds are
    /// mutable since 1.28 (or since they exist).
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let sp = p("spec");
        immutable_semantic(
            &self.spec.attach_required,
            &old.spec.attach_required,
            &sp.child("attachedRequired"),
            &mut errs,
        );
        immutable_semantic(
            &self.spec.volume_lifecycle_modes,
            &old.spec.volume_lifecycle_modes,
            &sp.child("volumeLifecycleModes"),
            &mut errs,
        );
        errs
    }
}

// --- CSINode ---------------------------------------------------------------------

/// `validateCSINodeDriver`. Upstream reports the topology-key errors on the driver's
/// own path, not on `topologyKeys`.
fn validate_csi_node_driver(
    driver: &storage::CSINodeDriver,
    names: &mut BTreeSet<String>,
    path: &FieldPath,
    errs: &mut Errs,
) {
    csi_driver_name(&driver.name, &path.child("name"), errs);
    let id_path = path.child("nodeID");
    if driver.node_id.is_empty() {
        errs.push(FieldError::required(&id_path, ""));
    }
    if driver.node_id.len() > CSI_NODE_ID_MAX_LENGTH {
        errs.push(FieldError::invalid(
            &id_path,
            driver.node_id.as_str(),
            format!("must be {CSI_NODE_ID_MAX_LENGTH} characters or less"),
        ));
    }
    if let Some(count) = driver.allocatable.as_ref().and_then(|a| a.count) {
        errs.extend(validate_nonnegative_field(
            count.into(),
            &path.child("allocatable").child("count"),
        ));
    }
    if !names.insert(driver.name.clone()) {
        errs.push(FieldError::duplicate(
            &path.child("name"),
            driver.name.as_str(),
        ));
    }
    let mut keys = BTreeSet::new();
    for key in driver.topology_keys.iter().flatten() {
        if key.is_empty() {
            errs.push(FieldError::required(path, ""));
        }
        if !keys.insert(key.as_str()) {
            errs.push(FieldError::duplicate(path, key.as_str()));
        }
        qualified_name(key, path, errs);
    }
}

/// The node name is `metadata.name`, checked by the registry.
impl Validate for storage::CSINode {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let mut names = BTreeSet::new();
        let dp = p("spec").child("drivers");
        for (i, driver) in self.spec.drivers.iter().enumerate() {
            validate_csi_node_driver(driver, &mut names, &dp.index(i), &mut errs);
        }
        errs
    }
    /// Drivers may be added and removed; one present in both (by name) may not change
    /// at all, allocatable included (`MutableCSINodeAllocatableCount` is off in 1.33).
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let dp = p("spec").child("drivers");
        for old_driver in &old.spec.drivers {
            for new_driver in self
                .spec
                .drivers
                .iter()
                .filter(|d| d.name == old_driver.name)
            {
                immutable_semantic(new_driver, old_driver, &dp, &mut errs);
            }
        }
        errs
    }
}

// --- CSIStorageCapacity ----------------------------------------------------------

/// `ValidateCSIStorageCapacity`; `allow_invalid_label_values` is upstream's
/// `AllowInvalidLabelValueInSelector` (set on update when the old selector was
/// already invalid): the label-value checks of `matchExpressions` values are skipped.
fn validate_capacity(
    c: &storage::CSIStorageCapacity,
    allow_invalid_label_values: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(sel) = &c.node_topology {
        let mut sel_errs = Vec::new();
        label_selector(sel, &p("nodeTopology"), &mut sel_errs);
        if allow_invalid_label_values {
            sel_errs
                .retain(|e| !(e.kind == FieldErrorKind::Invalid && is_selector_value(&e.field)));
        }
        errs.extend(sel_errs);
    }
    msgs_invalid(
        name_is_dns_subdomain(&c.storage_class_name, false),
        &c.storage_class_name,
        &p("storageClassName"),
        &mut errs,
    );
    if let Some(q) = &c.capacity {
        quantity(&q.0, &p("capacity"), &mut errs);
    }
    // Upstream does not check maximumVolumeSize; only a malformed quantity (which
    // upstream rejects while decoding) is reported.
    if let Some(q) = &c.maximum_volume_size
        && parse_quantity(&q.0).is_none()
    {
        errs.push(FieldError::invalid(
            &p("maximumVolumeSize"),
            q.0.as_str(),
            QUANTITY_FORMAT_MSG,
        ));
    }
    errs
}

/// `nodeTopology.matchExpressions[i].values[j]`.
fn is_selector_value(field: &str) -> bool {
    field
        .strip_prefix("nodeTopology.matchExpressions[")
        .and_then(|rest| rest.split_once("].values["))
        .is_some_and(|(_, tail)| tail.ends_with(']') && !tail.contains('.'))
}

/// Namespaced; the name is `metadata.name` (a DNS subdomain), checked by the registry.
impl Validate for storage::CSIStorageCapacity {
    fn validate_create(&self) -> Vec<FieldError> {
        validate_capacity(self, false)
    }
    /// capacity and maximumVolumeSize may change; the inputs of `GetCapacity`
    /// (nodeTopology, storageClassName) may not.
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let old_invalid = old.node_topology.as_ref().is_some_and(|sel| {
            let mut e = Vec::new();
            label_selector(sel, &p("nodeTopology"), &mut e);
            !e.is_empty()
        });
        let mut errs = validate_capacity(self, old_invalid);
        immutable_semantic(
            &self.node_topology,
            &old.node_topology,
            &p("nodeTopology"),
            &mut errs,
        );
        if self.storage_class_name != old.storage_class_name {
            errs.push(FieldError::invalid(
                &p("storageClassName"),
                self.storage_class_name.as_str(),
                FIELD_IMMUTABLE_ERROR_MSG,
            ));
        }
        errs
    }
}

// --- VolumeAttachment ------------------------------------------------------------

/// `validatePVSecretReference`.
fn pv_secret_ref(r: &core::SecretReference, path: &FieldPath, errs: &mut Errs) {
    match r.name.as_deref().unwrap_or_default() {
        "" => errs.push(FieldError::required(&path.child("name"), "")),
        name => dns_subdomain(name, &path.child("name"), errs),
    }
    match r.namespace.as_deref().unwrap_or_default() {
        "" => errs.push(FieldError::required(&path.child("namespace"), "")),
        ns => dns_label(ns, &path.child("namespace"), errs),
    }
}

/// `validateCSIPersistentVolumeSource`.
fn csi_pv_source(csi: &core::CSIPersistentVolumeSource, path: &FieldPath, errs: &mut Errs) {
    csi_driver_name(&csi.driver, &path.child("driver"), errs);
    if csi.volume_handle.is_empty() {
        errs.push(FieldError::required(&path.child("volumeHandle"), ""));
    }
    let refs = [
        (
            &csi.controller_publish_secret_ref,
            "controllerPublishSecretRef",
        ),
        (
            &csi.controller_expand_secret_ref,
            "controllerExpandSecretRef",
        ),
        (&csi.node_publish_secret_ref, "nodePublishSecretRef"),
        (&csi.node_expand_secret_ref, "nodeExpandSecretRef"),
    ];
    for (r, name) in refs {
        if let Some(r) = r {
            pv_secret_ref(r, &path.child(name), errs);
        }
    }
}

/// Whether `path.Clean(p) == "/"`: rooted, and no element left after `.` and `..`.
fn cleans_to_root(p: &str) -> bool {
    if !p.starts_with('/') {
        return false;
    }
    let mut depth = 0usize;
    for e in p.split('/') {
        match e {
            "" | "." => {}
            ".." => depth = depth.saturating_sub(1),
            _ => depth += 1,
        }
    }
    depth == 0
}

/// `ValidatePersistentVolumeSpec` with `validateInlinePersistentVolumeSpec`: a CSI
/// source only, no capacity, claimRef, nodeAffinity or class, Retain and Filesystem.
/// Of the sources only CSI's fields are checked (any other source already makes the
/// spec invalid: CSI is required and at most one source is allowed).
fn inline_pv_spec(spec: &core::PersistentVolumeSpec, path: &FieldPath, errs: &mut Errs) {
    if spec.claim_ref.is_some() {
        errs.push(FieldError::forbidden(
            &path.child("claimRef"),
            INLINE_FORBIDDEN,
        ));
    }
    if spec.capacity.as_ref().is_some_and(|c| !c.is_empty()) {
        errs.push(FieldError::forbidden(
            &path.child("capacity"),
            INLINE_FORBIDDEN,
        ));
    }
    if spec.csi.is_none() {
        errs.push(FieldError::required(
            &path.child("csi"),
            "has to be specified in the context of inline volumes",
        ));
    }

    let ap = path.child("accessModes");
    let modes = spec.access_modes.as_deref().unwrap_or_default();
    if modes.is_empty() {
        errs.push(FieldError::required(&ap, ""));
    }
    let (mut rwop, mut other) = (false, false);
    for m in modes {
        if !PV_ACCESS_MODES.contains(&m.as_str()) {
            errs.push(FieldError::not_supported(&ap, m.as_str(), PV_ACCESS_MODES));
        } else if m == "ReadWriteOncePod" {
            rwop = true;
        } else {
            other = true;
        }
    }
    if rwop && other {
        errs.push(FieldError::forbidden(
            &ap,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }

    let policy = s(&spec.persistent_volume_reclaim_policy);
    if !policy.is_empty() && policy != "Retain" {
        errs.push(FieldError::forbidden(
            &path.child("persistentVolumeReclaimPolicy"),
            "may only be Retain in the context of inline volumes",
        ));
    }
    if spec.node_affinity.is_some() {
        errs.push(FieldError::forbidden(
            &path.child("nodeAffinity"),
            INLINE_FORBIDDEN,
        ));
    }

    // Upstream's order and names; flexVolume is counted but never refused.
    let sources: [(bool, &str); 22] = [
        (spec.host_path.is_some(), "hostPath"),
        (spec.gce_persistent_disk.is_some(), "gcePersistentDisk"),
        (
            spec.aws_elastic_block_store.is_some(),
            "awsElasticBlockStore",
        ),
        (spec.glusterfs.is_some(), "glusterfs"),
        (spec.flocker.is_some(), "flocker"),
        (spec.nfs.is_some(), "nfs"),
        (spec.rbd.is_some(), "rbd"),
        (spec.quobyte.is_some(), "quobyte"),
        (spec.cephfs.is_some(), "cephFS"),
        (spec.iscsi.is_some(), "iscsi"),
        (spec.cinder.is_some(), "cinder"),
        (spec.fc.is_some(), "fc"),
        (spec.flex_volume.is_some(), "flexVolume"),
        (spec.azure_file.is_some(), "azureFile"),
        (spec.vsphere_volume.is_some(), "vsphereVolume"),
        (
            spec.photon_persistent_disk.is_some(),
            "photonPersistentDisk",
        ),
        (spec.portworx_volume.is_some(), "portworxVolume"),
        (spec.azure_disk.is_some(), "azureDisk"),
        (spec.scale_io.is_some(), "scaleIO"),
        (spec.local.is_some(), "local"),
        (spec.storageos.is_some(), "storageos"),
        (spec.csi.is_some(), "csi"),
    ];
    let mut count = 0;
    for (set, name) in sources {
        if !set {
            continue;
        }
        if count > 0 && name != "flexVolume" {
            errs.push(FieldError::forbidden(
                &path.child(name),
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        count += 1;
        match name {
            // An inline spec never has node affinity (it is refused above).
            "local" => errs.push(FieldError::required(
                &path.child("nodeAffinity"),
                "Local volume requires node affinity",
            )),
            "csi" => {
                if let Some(csi) = &spec.csi {
                    csi_pv_source(csi, &path.child("csi"), errs);
                }
            }
            _ => {}
        }
    }
    if count == 0 {
        errs.push(FieldError::required(path, "must specify a volume type"));
    }
    if spec
        .host_path
        .as_ref()
        .is_some_and(|h| cleans_to_root(&h.path))
        && policy == "Recycle"
    {
        errs.push(FieldError::forbidden(
            &path.child("persistentVolumeReclaimPolicy"),
            "may not be 'recycle' for a hostPath mount of '/'",
        ));
    }
    if !s(&spec.storage_class_name).is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("storageClassName"),
            INLINE_FORBIDDEN,
        ));
    }
    if let Some(mode) = &spec.volume_mode
        && mode != "Filesystem"
    {
        errs.push(FieldError::forbidden(
            &path.child("volumeMode"),
            "may not specify volumeMode other than Filesystem in the context of inline volumes",
        ));
    }
    // volumeAttributesClassName: inline specs are validated with the
    // VolumeAttributesClass option off, so it is not checked.
}

/// `validateVolumeError`. Upstream reports the message limit as the metadata size.
fn volume_error(e: &storage::VolumeError, path: &FieldPath, errs: &mut Errs) {
    if s(&e.message).len() > MAX_VOLUME_ERROR_MESSAGE_SIZE {
        errs.push(FieldError::too_long(
            &path.child("message"),
            Some(MAX_ATTACHED_VOLUME_METADATA_SIZE),
        ));
    }
    if let Some(code) = e.error_code
        && code < 0
    {
        errs.push(FieldError::invalid(
            &path.child("errorCode"),
            code,
            inclusive_range_error(0, i32::MAX.into()),
        ));
    }
}

/// `ValidateVolumeAttachment` (create and update, status included).
fn validate_attachment(va: &storage::VolumeAttachment) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let sp = p("spec");
    if va.spec.attacher.is_empty() {
        errs.push(FieldError::required(&sp.child("attacher"), ""));
    }
    let src = &va.spec.source;
    let srcp = sp.child("source");
    match (&src.inline_volume_spec, &src.persistent_volume_name) {
        (None, None) => errs.push(FieldError::required(&srcp, EXACTLY_ONE_SOURCE)),
        (Some(_), Some(_)) => errs.push(FieldError::forbidden(&srcp, EXACTLY_ONE_SOURCE)),
        (None, Some(pv)) => {
            if pv.is_empty() {
                errs.push(FieldError::required(
                    &srcp.child("persistentVolumeName"),
                    "must specify non empty persistentVolumeName",
                ));
            }
        }
        (Some(spec), None) => inline_pv_spec(spec, &srcp.child("inlineVolumeSpec"), &mut errs),
    }
    msgs_invalid(
        name_is_dns_subdomain(&va.spec.node_name, false),
        &va.spec.node_name,
        &sp.child("nodeName"),
        &mut errs,
    );
    if let Some(status) = &va.status {
        let stp = p("status");
        let size: usize = status
            .attachment_metadata
            .iter()
            .flatten()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        if size > MAX_ATTACHED_VOLUME_METADATA_SIZE {
            errs.push(FieldError::too_long(
                &stp.child("attachmentMetadata"),
                Some(MAX_ATTACHED_VOLUME_METADATA_SIZE),
            ));
        }
        if let Some(e) = &status.attach_error {
            volume_error(e, &stp.child("attachError"), &mut errs);
        }
        if let Some(e) = &status.detach_error {
            volume_error(e, &stp.child("detachError"), &mut errs);
        }
    }
    errs
}

/// Cluster-scoped, with a status subresource; the name is `metadata.name` (a DNS
/// subdomain), checked by the registry.
impl Validate for storage::VolumeAttachment {
    /// Plus `ValidateVolumeAttachmentV1`, which upstream runs on create only: the
    /// attacher is a CSI driver name, the persistent volume name a DNS subdomain.
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = validate_attachment(self);
        csi_driver_name(&self.spec.attacher, &p("spec").child("attacher"), &mut errs);
        if let Some(pv) = &self.spec.source.persistent_volume_name {
            msgs_invalid(
                name_is_dns_subdomain(pv, false),
                pv,
                &p("spec").child("source").child("persistentVolumeName"),
                &mut errs,
            );
        }
        errs
    }
    /// Main resource and status: the spec is read-only.
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = validate_attachment(self);
        immutable_semantic(&self.spec, &old.spec, &p("spec"), &mut errs);
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selector_value_paths() {
        assert!(is_selector_value(
            "nodeTopology.matchExpressions[0].values[3]"
        ));
        assert!(!is_selector_value("nodeTopology.matchExpressions[0].key"));
        assert!(!is_selector_value("nodeTopology.matchLabels"));
        assert!(!is_selector_value(
            "nodeTopology.matchExpressions[0].values"
        ));
    }

    #[test]
    fn root_paths() {
        for p in ["/", "//", "/.", "/..", "/./../", "/a/..", "/a/b/../../"] {
            assert!(cleans_to_root(p), "{p}");
        }
        for p in ["", ".", "/a", "a/..", "/a/../b"] {
            assert!(!cleans_to_root(p), "{p}");
        }
    }

    #[test]
    fn semantic_equality_folds_empty_collections() {
        let a = storage::CSINodeDriver {
            name: "d".into(),
            node_id: "n".into(),
            topology_keys: Some(vec![]),
            allocatable: None,
        };
        let b = storage::CSINodeDriver {
            topology_keys: None,
            ..a.clone()
        };
        assert_eq!(semantic(&a), semantic(&b));
        let c = storage::CSINodeDriver {
            node_id: "m".into(),
            ..a.clone()
        };
        assert_ne!(semantic(&a), semantic(&c));
    }
}
