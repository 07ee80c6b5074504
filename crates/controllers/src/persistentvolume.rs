//! The PersistentVolume binder controller (upstream
//! `pkg/controller/volume/persistentvolume`, kube-controller-manager's
//! `persistentvolume-binder-controller`): PersistentVolumeClaims bound to
//! PersistentVolumes, volumes released when their claim goes, the reclaim policy
//! applied, and external provisioners told which claims wait for a volume.
//!
//! Wiring (manager.rs): name `persistentvolume-binder-controller`, alias
//! `persistentvolume-binder`, ServiceAccount `persistent-volume-binder` (role
//! `system:controller:persistent-volume-binder`), one worker (upstream runs one per
//! queue: syncClaim is not reentrant):
//!
//! ```ignore
//! "persistentvolume-binder-controller" => {
//!     (PersistentVolumeController::new(&factory, client.clone(), rec)?, 1)
//! }
//! ```
//!
//! `--pvclaimbinder-sync-period` (default 15 s): [`PersistentVolumeController::with_sync_period`].
//!
//! One queue, two key spaces: `claim:<namespace>/<name>` (upstream `syncClaim`) and
//! `volume:<name>` (`syncVolume`). Every live object is synced again after the sync
//! period (upstream's `resync`). A claim's deletion queues its volume, a volume's
//! deletion its claim, as upstream's handlers.
//!
//! Pure part: [`plan_claim`] (syncUnboundClaim / syncBoundClaim), [`plan_volume`]
//! (syncVolume), [`reclaim_plan`] and [`find_deleter`] (reclaimVolume and its
//! deleter lookup), [`is_volume_released`], and the object edits of `bind`:
//! [`bind_volume_to_claim`], [`bind_claim_to_volume`], [`volume_with_phase`],
//! [`claim_with_status`], [`unbind_volume`], [`claim_with_provisioner`]. Matching
//! ([`find_best_match_for_claim`]: class, access modes, volume mode, selector,
//! smallest fitting size, pre-bound volumes first, no node affinity) is shared
//! with the scheduler in `ferrokube_api::persistentvolume`.
//!
//! The controller keeps the objects it wrote (upstream's own volume and claim caches):
//! a read takes them over the informer's copy while the informer lags behind, so the
//! writes of one binding do not race its own watch events. A write answered with 409
//! re-reads the object and plans again from the fresh copy (twice, then the key is
//! retried with back-off).
//!
//! In-tree plugins: only hostPath ([`crate::hostpath`]), as upstream's controller
//! manager has it: its provisioner (`kubernetes.io/host-path`, with
//! `--enable-hostpath-provisioner`) and its deleter (released `Delete` hostPath volumes
//! under `/tmp`). Volumes it provisions with the `Delete` policy carry upstream's
//! `kubernetes.io/pv-controller` finalizer (HonorPVReclaimPolicy, GA in 1.33) until
//! their directory is gone.
//!
//! Deviations: no other in-tree volume plugin. A claim whose class names another
//! `kubernetes.io/` provisioner gets upstream's `ProvisioningFailed` "no volume plugin
//! matched name" (CSI migration of in-tree provisioners is not done); a released
//! `Delete` volume that neither an external provisioner nor the hostPath deleter
//! deletes is `Failed` with `VolumeFailedDelete`; `Recycle` volumes are `Failed` with
//! upstream's "No recycler plugin found for the volume!" (upstream recycles hostPath
//! and NFS volumes with a scrubber pod). The controller sets
//! `status.lastPhaseTransitionTime` itself (upstream's apiserver does).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use parking_lot::Mutex;

use ferrokube_api::persistentvolume::{
    ANN_BETA_STORAGE_PROVISIONER, ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER,
    ANN_DYNAMICALLY_PROVISIONED, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
    access_modes_satisfied, claim_class, claim_request, find_best_match_for_claim,
    is_volume_bound_to_claim, volume_capacity, volume_class, volume_mode_mismatch,
};
use ferrokube_apimachinery::quantity;
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::hostpath::{self, HostPathPlugin, ProvisionError};
use crate::pvcprotection::{POD_CLAIM_INDEX, index_pods_by_claim};
use crate::replicaset::is_conflict;
use crate::{Action, Controller, Error, Result};

/// Upstream `--pvclaimbinder-sync-period` default.
pub const DEFAULT_SYNC_PERIOD: Duration = Duration::from_secs(15);
/// On a volume: the CSI driver a migrated in-tree volume is handled by (the controller
/// stands down).
pub const ANN_MIGRATED_TO: &str = "pv.kubernetes.io/migrated-to";
/// On a volume: the size before an offline resize, what a binding claim reports.
pub const ANN_PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";

/// Upstream `PVDeletionInTreeProtectionFinalizer`: on a volume an in-tree plugin
/// provisioned with the `Delete` policy, until the plugin has deleted its storage.
pub const PV_IN_TREE_PROTECTION_FINALIZER: &str = "kubernetes.io/pv-controller";

const CLAIM_PREFIX: &str = "claim:";
const VOLUME_PREFIX: &str = "volume:";
/// Syncs of one key that re-read after a 409 before it is retried with back-off.
const CONFLICT_ATTEMPTS: usize = 3;

/// An event a plan asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

fn event(type_: EventType, reason: &'static str, message: impl Into<String>) -> PlannedEvent {
    PlannedEvent {
        type_,
        reason,
        message: message.into(),
    }
}

/// What a claim's sync does (upstream `syncUnboundClaim` / `syncBoundClaim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimPlan {
    /// `bind`: the volume's claimRef, the volume Bound, the claim's volumeName and
    /// annotations, the claim Bound (each step written only when it changes).
    Bind(String),
    /// The claim Pending without capacity or access modes, after the event.
    Pending(Option<PlannedEvent>),
    /// A provisioner is asked for a volume: the provisioner annotations, then the
    /// hostPath plugin provisions it (for [`hostpath::PLUGIN_NAME`]) or
    /// `ExternalProvisioning` says who is expected to.
    Provision(String),
    /// Only the event (provisioning cannot start; upstream leaves the status alone).
    Event(PlannedEvent),
    /// The claim Lost; the event goes out with the phase change only.
    Lost(PlannedEvent),
    /// Upstream returns an error: retried with back-off.
    Fail(String),
}

/// What a volume's sync does (upstream `syncVolume`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumePlan {
    /// The phase (written when it differs).
    Phase(&'static str),
    /// The claim is gone (or bound elsewhere and this volume was provisioned for it):
    /// Released first when `release`, then the reclaim policy.
    Reclaim { release: bool },
    /// The binding is the claim's sync to finish: queue it.
    SyncClaim(String),
    /// The claim cannot use the volume (volume modes differ): events on both.
    Mismatch { volume: String, claim: String },
    /// The claim is bound to another volume: drop the binding (`unbindVolume`).
    Unbind,
}

/// What the reclaim policy asks for (upstream `reclaimVolume`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReclaimPlan {
    /// Retain, or a migrated volume: nothing.
    Nothing,
    /// Recycle: no recycler is known (after upstream's in-use check).
    Recycle,
    /// Delete: [`find_deleter`] says who deletes it.
    Delete,
    /// An unknown policy: Failed with this event.
    Fail(PlannedEvent),
}

fn has_annotation(meta: &ObjectMeta, key: &str) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(key))
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn set_annotation(meta: &mut ObjectMeta, key: &str, value: &str) {
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(key.to_string(), value.to_string());
}

/// `namespace/name` of a claim.
pub fn claim_key(claim: &PersistentVolumeClaim) -> String {
    key_of(
        claim.metadata.namespace.as_deref(),
        claim.metadata.name.as_deref().unwrap_or(""),
    )
}

fn claim_ref(volume: &PersistentVolume) -> Option<&ObjectReference> {
    volume.spec.as_ref()?.claim_ref.as_ref()
}

/// A volume's claimRef to `claim` (upstream `ref.GetReference`).
fn claim_reference(claim: &PersistentVolumeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("PersistentVolumeClaim".into()),
        namespace: claim.metadata.namespace.clone(),
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        resource_version: claim.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// `namespace/name` of the claim a claimRef names.
fn claim_ref_key(r: &ObjectReference) -> String {
    key_of(r.namespace.as_deref(), r.name.as_deref().unwrap_or(""))
}

fn uid(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or("")
}

fn claim_volume_name(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

fn volume_phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn reclaim_policy(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("")
}

/// Upstream `IsDelayBindingMode`: the claim's class binds `WaitForFirstConsumer`. A
/// missing class binds immediately; a class without a mode is an error.
pub fn is_delay_binding(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
) -> Result<bool, String> {
    let name = claim_class(claim);
    if name.is_empty() {
        return Ok(false);
    }
    match class {
        None => Ok(false),
        Some(c) => match c.volume_binding_mode.as_deref() {
            None => Err(format!(
                "VolumeBindingMode not set for StorageClass {name:?}"
            )),
            Some(mode) => Ok(mode == "WaitForFirstConsumer"),
        },
    }
}

/// Upstream `checkVolumeSatisfyClaim`: why a volume the claim names cannot be its.
pub fn check_volume_satisfy_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<(), String> {
    let name = volume.metadata.name.as_deref().unwrap_or("");
    if volume.metadata.deletion_timestamp.is_some() {
        return Err(format!("the volume is marked for deletion {name:?}"));
    }
    if volume_capacity(volume) < claim_request(claim) {
        return Err("requested PV is too small".into());
    }
    if volume_class(volume) != claim_class(claim) {
        return Err("storageClassName does not match".into());
    }
    let claim_spec = claim.spec.clone().unwrap_or_default();
    let volume_spec = volume.spec.clone().unwrap_or_default();
    if volume_mode_mismatch(&claim_spec, &volume_spec) {
        return Err("incompatible volumeMode".into());
    }
    if !access_modes_satisfied(claim, volume) {
        return Err("incompatible accessMode".into());
    }
    let set = |c: &Option<String>| c.as_deref().is_some_and(|c| !c.is_empty());
    if set(&claim_spec.volume_attributes_class_name)
        || set(&volume_spec.volume_attributes_class_name)
    {
        return Err(
            "volumeAttributesClassName is not supported when the feature-gate VolumeAttributesClass is disabled"
                .into(),
        );
    }
    Ok(())
}

/// Upstream `syncClaim`: what to do with `claim`, given every known volume, the
/// claim's StorageClass (if it exists) and the names of the unscheduled pods using it.
pub fn plan_claim(
    claim: &PersistentVolumeClaim,
    volumes: &[&PersistentVolume],
    class: Option<&StorageClass>,
    unscheduled_pods: &[String],
) -> ClaimPlan {
    let volume_name = claim_volume_name(claim);
    let find = |name: &str| {
        volumes
            .iter()
            .copied()
            .find(|v| v.metadata.name.as_deref() == Some(name))
    };
    if has_annotation(&claim.metadata, ANN_BIND_COMPLETED) {
        // syncBoundClaim: bound once; only a Lost claim may come of it.
        if volume_name.is_empty() {
            return ClaimPlan::Lost(event(
                EventType::Warning,
                "ClaimLost",
                "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
            ));
        }
        let Some(volume) = find(volume_name) else {
            return ClaimPlan::Lost(event(
                EventType::Warning,
                "ClaimLost",
                "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
            ));
        };
        return match claim_ref(volume) {
            // Unbound meanwhile (or the volume's update is not seen yet): bind again.
            None => ClaimPlan::Bind(volume_name.to_string()),
            Some(r) if r.uid.as_deref().unwrap_or("") == uid(&claim.metadata) => {
                ClaimPlan::Bind(volume_name.to_string())
            }
            Some(_) => ClaimPlan::Lost(event(
                EventType::Warning,
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            )),
        };
    }
    if volume_name.is_empty() {
        let delay = match is_delay_binding(claim, class) {
            Ok(d) => d,
            Err(e) => return ClaimPlan::Fail(e),
        };
        return match find_best_match_for_claim(claim, volumes, delay) {
            Err(e) => ClaimPlan::Fail(format!(
                "error finding PV for claim {:?}: {e}",
                claim_key(claim)
            )),
            Ok(Some(v)) => ClaimPlan::Bind(v.metadata.name.clone().unwrap_or_default()),
            Ok(None) if delay && !has_annotation(&claim.metadata, ANN_SELECTED_NODE) => {
                ClaimPlan::Pending(Some(wait_for_consumer_event(unscheduled_pods)))
            }
            Ok(None) if !claim_class(claim).is_empty() => provision_plan(claim, class),
            Ok(None) => ClaimPlan::Pending(Some(event(
                EventType::Normal,
                "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set",
            ))),
        };
    }
    // The user asked for a specific volume.
    let Some(volume) = find(volume_name) else {
        // Not there (yet): Pending, try again later.
        return ClaimPlan::Pending(None);
    };
    match claim_ref(volume) {
        None => match check_volume_satisfy_claim(volume, claim) {
            Ok(()) => ClaimPlan::Bind(volume_name.to_string()),
            Err(why) => ClaimPlan::Pending(Some(event(
                EventType::Warning,
                "VolumeMismatch",
                format!("Cannot bind to requested volume {volume_name:?}: {why}"),
            ))),
        },
        Some(_) if is_volume_bound_to_claim(volume, claim) => {
            ClaimPlan::Bind(volume_name.to_string())
        }
        Some(r) => {
            if has_annotation(&claim.metadata, ANN_BOUND_BY_CONTROLLER) {
                ClaimPlan::Fail(format!(
                    "invalid binding of claim {:?} to volume {volume_name:?}: volume already claimed by {:?}",
                    claim_key(claim),
                    claim_ref_key(r)
                ))
            } else {
                // Claimed by someone else; the user may free it.
                ClaimPlan::Pending(None)
            }
        }
    }
}

/// Upstream `emitEventForUnboundDelayBindingClaim`.
fn wait_for_consumer_event(unscheduled_pods: &[String]) -> PlannedEvent {
    match unscheduled_pods {
        [] => event(
            EventType::Normal,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding",
        ),
        [one] => event(
            EventType::Normal,
            "WaitForPodScheduled",
            format!("waiting for pod {one} to be scheduled"),
        ),
        many => event(
            EventType::Normal,
            "WaitForPodScheduled",
            format!("waiting for pods {} to be scheduled", many.join(",")),
        ),
    }
}

/// Upstream `provisionClaim` / `findProvisionablePlugin`, with hostPath the only
/// in-tree plugin, and `provisionClaimOperation`'s data source check.
fn provision_plan(claim: &PersistentVolumeClaim, class: Option<&StorageClass>) -> ClaimPlan {
    let Some(class) = class else {
        return ClaimPlan::Event(event(
            EventType::Warning,
            "ProvisioningFailed",
            format!(
                "storageclass.storage.k8s.io {:?} not found",
                claim_class(claim)
            ),
        ));
    };
    if class.provisioner == hostpath::PLUGIN_NAME {
        if claim.spec.as_ref().is_some_and(|s| s.data_source.is_some()) {
            return ClaimPlan::Event(event(
                EventType::Warning,
                "ProvisioningFailed",
                format!(
                    "plugin {:?} is not a CSI plugin. Only CSI plugin can provision a claim with a datasource",
                    hostpath::PLUGIN_NAME
                ),
            ));
        }
    } else if class.provisioner.starts_with("kubernetes.io/") {
        return ClaimPlan::Event(event(
            EventType::Warning,
            "ProvisioningFailed",
            format!("no volume plugin matched name: {}", class.provisioner),
        ));
    }
    ClaimPlan::Provision(class.provisioner.clone())
}

/// Upstream's `ExternalProvisioning` note.
pub fn external_provisioning_message(provisioner: &str) -> String {
    format!(
        "Waiting for a volume to be created either by the external provisioner '{provisioner}' \
         or manually by the system administrator. If volume creation is delayed, please verify \
         that the provisioner is running and correctly registered."
    )
}

/// Upstream `syncVolume`, once the claim its claimRef names is resolved (`None`: gone,
/// or replaced by another of the same name).
pub fn plan_volume(volume: &PersistentVolume, claim: Option<&PersistentVolumeClaim>) -> VolumePlan {
    let Some(r) = claim_ref(volume) else {
        return VolumePlan::Phase("Available");
    };
    if r.uid.as_deref().unwrap_or("").is_empty() {
        // Pre-bound by the user; the claim's sync binds it.
        return VolumePlan::Phase("Available");
    }
    let name = volume.metadata.name.as_deref().unwrap_or("");
    let phase = volume_phase(volume);
    let release = phase != "Released" && phase != "Failed";
    let Some(claim) = claim else {
        return VolumePlan::Reclaim { release };
    };
    let bound_to = claim_volume_name(claim);
    if bound_to.is_empty() {
        let claim_spec = claim.spec.clone().unwrap_or_default();
        let volume_spec = volume.spec.clone().unwrap_or_default();
        if volume_mode_mismatch(&claim_spec, &volume_spec) {
            let claim_name = claim.metadata.name.as_deref().unwrap_or("");
            return VolumePlan::Mismatch {
                volume: format!(
                    "Cannot bind PersistentVolume to requested PersistentVolumeClaim {claim_name:?} due to incompatible volumeMode."
                ),
                claim: format!(
                    "Cannot bind PersistentVolume {name:?} to requested PersistentVolumeClaim due to incompatible volumeMode."
                ),
            };
        }
        return VolumePlan::SyncClaim(claim_key(claim));
    }
    if bound_to == name {
        return VolumePlan::Phase("Bound");
    }
    // The claim is bound to another volume.
    if has_annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED)
        && reclaim_policy(volume) == "Delete"
    {
        // Provisioned for it and not needed any more.
        return VolumePlan::Reclaim { release };
    }
    VolumePlan::Unbind
}

/// Upstream `reclaimVolume`.
pub fn reclaim_plan(volume: &PersistentVolume) -> ReclaimPlan {
    if annotation(&volume.metadata, ANN_MIGRATED_TO).is_some_and(|d| !d.is_empty()) {
        return ReclaimPlan::Nothing;
    }
    match reclaim_policy(volume) {
        "Retain" => ReclaimPlan::Nothing,
        "Recycle" => ReclaimPlan::Recycle,
        "Delete" => ReclaimPlan::Delete,
        _ => ReclaimPlan::Fail(event(
            EventType::Warning,
            "VolumeUnknownReclaimPolicy",
            "Volume has unrecognized PersistentVolumeReclaimPolicy",
        )),
    }
}

/// Who deletes a released `Delete` volume (upstream `findDeletablePlugin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleter {
    /// The external provisioner named in `pv.kubernetes.io/provisioned-by`.
    External,
    /// The hostPath plugin: this directory, then the object.
    HostPath(String),
    /// Nobody: the volume is Failed with this message.
    Missing(String),
}

/// Upstream `findDeletablePlugin` (then `NewDeleter`), with hostPath the only in-tree
/// plugin: by the provisioner's name first, else by the volume's source.
pub fn find_deleter(volume: &PersistentVolume) -> Deleter {
    let name = volume.metadata.name.as_deref().unwrap_or("");
    let host_path = volume
        .spec
        .as_ref()
        .and_then(|s| s.host_path.as_ref())
        .map(|h| h.path.clone());
    if let Some(p) = annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED)
        && !p.is_empty()
    {
        if p == hostpath::PLUGIN_NAME {
            return match host_path {
                Some(path) => Deleter::HostPath(path),
                None => Deleter::Missing(format!(
                    "failed to create deleter for volume {name:?}: spec.PersistentVolumeSource.HostPath is nil"
                )),
            };
        }
        if p.starts_with("kubernetes.io/") {
            return Deleter::Missing(format!("no volume plugin matched name: {p}"));
        }
        return Deleter::External;
    }
    if let Some(path) = host_path {
        return Deleter::HostPath(path);
    }
    let why = if volume.spec.as_ref().is_some_and(|s| s.csi.is_some()) {
        "no deletable volume plugin matched"
    } else {
        "no volume plugin matched"
    };
    Deleter::Missing(format!(
        "error getting deleter volume plugin for volume {name:?}: {why}"
    ))
}

/// Upstream `modifyDeletionFinalizers` for the volumes the hostPath plugin provisioned:
/// [`PV_IN_TREE_PROTECTION_FINALIZER`] while the policy is `Delete`, not with `Retain`
/// or `Recycle`. `None` when the finalizers are right, or when the volume is being
/// deleted (a finalizer cannot be added then).
pub fn volume_with_deletion_finalizer(volume: &PersistentVolume) -> Option<PersistentVolume> {
    if volume.metadata.deletion_timestamp.is_some()
        || annotation(&volume.metadata, ANN_DYNAMICALLY_PROVISIONED) != Some(hostpath::PLUGIN_NAME)
    {
        return None;
    }
    let finalizers = volume.metadata.finalizers.as_deref().unwrap_or_default();
    let has = finalizers
        .iter()
        .any(|f| f == PV_IN_TREE_PROTECTION_FINALIZER);
    let mut new = volume.clone();
    match reclaim_policy(volume) {
        "Delete" if !has => new
            .metadata
            .finalizers
            .get_or_insert_default()
            .push(PV_IN_TREE_PROTECTION_FINALIZER.to_string()),
        "Retain" | "Recycle" if has => {
            new.metadata.finalizers = Some(without_in_tree_finalizer(finalizers));
        }
        _ => return None,
    }
    Some(new)
}

fn without_in_tree_finalizer(finalizers: &[String]) -> Vec<String> {
    finalizers
        .iter()
        .filter(|f| *f != PV_IN_TREE_PROTECTION_FINALIZER)
        .cloned()
        .collect()
}

/// The object the hostPath plugin provisioned for `claim`, bound to it as upstream's
/// `provisionClaimOperation` saves it.
pub fn bound_provisioned_volume(
    mut volume: PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> PersistentVolume {
    let spec = volume.spec.get_or_insert_default();
    spec.claim_ref = Some(claim_reference(claim));
    spec.storage_class_name = Some(claim_class(claim).to_string());
    let delete = spec.persistent_volume_reclaim_policy.as_deref() == Some("Delete");
    set_annotation(&mut volume.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
    set_annotation(
        &mut volume.metadata,
        ANN_DYNAMICALLY_PROVISIONED,
        hostpath::PLUGIN_NAME,
    );
    if delete {
        volume.metadata.finalizers = Some(vec![PV_IN_TREE_PROTECTION_FINALIZER.to_string()]);
    }
    volume.status = Some(k8s_openapi::api::core::v1::PersistentVolumeStatus {
        phase: Some("Bound".into()),
        ..Default::default()
    });
    volume
}

/// Upstream `isVolumeReleased`: the volume's claim (as cached) is gone, replaced, or
/// bound to another volume.
pub fn is_volume_released(
    volume: &PersistentVolume,
    cached_claim: Option<&PersistentVolumeClaim>,
) -> bool {
    let Some(r) = claim_ref(volume) else {
        return false;
    };
    let ref_uid = r.uid.as_deref().unwrap_or("");
    if ref_uid.is_empty() {
        return false;
    }
    match cached_claim {
        Some(c) if uid(&c.metadata) == ref_uid => {
            let bound_to = claim_volume_name(c);
            !bound_to.is_empty() && Some(bound_to) != volume.metadata.name.as_deref()
        }
        _ => true,
    }
}

/// Upstream `GetBindVolumeToClaim`: the volume with its claimRef on the claim (and
/// `bound-by-controller` when the user had not pre-bound it), or `None` if already so.
pub fn bind_volume_to_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Option<PersistentVolume> {
    let by_controller = !is_volume_bound_to_claim(volume, claim);
    let mut new = volume.clone();
    let mut dirty = false;
    let same = claim_ref(volume).is_some_and(|r| {
        r.name == claim.metadata.name
            && r.namespace == claim.metadata.namespace
            && r.uid.as_deref().unwrap_or("") == uid(&claim.metadata)
    });
    if !same {
        new.spec.get_or_insert_with(Default::default).claim_ref = Some(claim_reference(claim));
        dirty = true;
    }
    if by_controller && !has_annotation(&new.metadata, ANN_BOUND_BY_CONTROLLER) {
        set_annotation(&mut new.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
        dirty = true;
    }
    dirty.then_some(new)
}

/// Upstream `bindClaimToVolume`: the claim with `spec.volumeName`, `bind-completed`
/// and (unless the user named the volume) `bound-by-controller`, or `None`.
pub fn bind_claim_to_volume(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
) -> Option<PersistentVolumeClaim> {
    let name = volume.metadata.name.clone().unwrap_or_default();
    let by_controller = claim_volume_name(claim) != name;
    let mut new = claim.clone();
    let mut dirty = false;
    if by_controller {
        new.spec.get_or_insert_with(Default::default).volume_name = Some(name);
        dirty = true;
    }
    if by_controller && !has_annotation(&new.metadata, ANN_BOUND_BY_CONTROLLER) {
        set_annotation(&mut new.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
        dirty = true;
    }
    if !has_annotation(&new.metadata, ANN_BIND_COMPLETED) {
        set_annotation(&mut new.metadata, ANN_BIND_COMPLETED, "yes");
        dirty = true;
    }
    dirty.then_some(new)
}

/// Upstream `updateVolumePhase`: the volume in `phase` (with `message`, since `now`),
/// or `None` when it is in it already.
pub fn volume_with_phase(
    volume: &PersistentVolume,
    phase: &str,
    message: &str,
    now: Timestamp,
) -> Option<PersistentVolume> {
    if volume_phase(volume) == phase {
        return None;
    }
    let mut new = volume.clone();
    let status = new.status.get_or_insert_with(Default::default);
    status.phase = Some(phase.to_string());
    status.message = (!message.is_empty()).then(|| message.to_string());
    status.last_phase_transition_time = Some(Time(now));
    Some(new)
}

fn storage(q: Option<&Quantity>) -> Option<i128> {
    q.and_then(|q| quantity::milli(&q.0))
}

/// Upstream `updateClaimStatus`: the claim in `phase`, with the volume's access modes
/// and (when it becomes bound) capacity, or without both when there is no volume;
/// `None` when nothing changes.
pub fn claim_with_status(
    claim: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<Option<PersistentVolumeClaim>, String> {
    let old = claim.status.clone().unwrap_or_default();
    let mut status: PersistentVolumeClaimStatus = old.clone();
    let mut dirty = false;
    let phase_changes = claim_phase(claim) != phase;
    if phase_changes {
        status.phase = Some(phase.to_string());
        dirty = true;
    }
    match volume {
        None => {
            if status.access_modes.is_some() {
                status.access_modes = None;
                dirty = true;
            }
            if status.capacity.is_some() {
                status.capacity = None;
                dirty = true;
            }
        }
        Some(volume) => {
            let spec = volume.spec.clone().unwrap_or_default();
            if status.access_modes != spec.access_modes {
                status.access_modes = spec.access_modes.clone();
                dirty = true;
            }
            // Capacity only when becoming bound: a difference later may be meant
            // (a filesystem smaller than its block device).
            if phase_changes {
                let name = volume.metadata.name.as_deref().unwrap_or("");
                let volume_cap = spec
                    .capacity
                    .as_ref()
                    .and_then(|c| c.get("storage"))
                    .ok_or_else(|| {
                        format!("PersistentVolume {name:?} is without a storage capacity")
                    })?;
                let claim_cap = old.capacity.as_ref().and_then(|c| c.get("storage"));
                if let Some(pre) = annotation(&volume.metadata, ANN_PRE_RESIZE_CAPACITY) {
                    let q = if quantity::milli(pre).is_some() {
                        Quantity(pre.to_string())
                    } else {
                        volume_cap.clone()
                    };
                    status
                        .capacity
                        .get_or_insert_with(Default::default)
                        .insert("storage".into(), q);
                    dirty = true;
                } else if claim_cap.is_none() || storage(Some(volume_cap)) != storage(claim_cap) {
                    status.capacity = spec.capacity.clone();
                    dirty = true;
                }
            }
        }
    }
    if !dirty {
        return Ok(None);
    }
    let mut new = claim.clone();
    new.status = Some(status);
    Ok(Some(new))
}

/// Upstream `unbindVolume`: a binding the controller made is dropped whole; a user's
/// pre-binding keeps its claimRef without the uid.
pub fn unbind_volume(volume: &PersistentVolume) -> PersistentVolume {
    let mut new = volume.clone();
    if has_annotation(&volume.metadata, ANN_BOUND_BY_CONTROLLER) {
        if let Some(spec) = &mut new.spec {
            spec.claim_ref = None;
        }
        if let Some(a) = &mut new.metadata.annotations {
            a.remove(ANN_BOUND_BY_CONTROLLER);
            if a.is_empty() {
                new.metadata.annotations = None;
            }
        }
    } else if let Some(r) = new.spec.as_mut().and_then(|s| s.claim_ref.as_mut()) {
        r.uid = None;
    }
    new
}

/// Upstream `setClaimProvisioner`: the claim with both provisioner annotations, or
/// `None` when it names the provisioner already.
pub fn claim_with_provisioner(
    claim: &PersistentVolumeClaim,
    provisioner: &str,
) -> Option<PersistentVolumeClaim> {
    if annotation(&claim.metadata, ANN_STORAGE_PROVISIONER) == Some(provisioner) {
        return None;
    }
    let mut new = claim.clone();
    set_annotation(&mut new.metadata, ANN_BETA_STORAGE_PROVISIONER, provisioner);
    set_annotation(&mut new.metadata, ANN_STORAGE_PROVISIONER, provisioner);
    Some(new)
}

/// Upstream `IsPodTerminated`: finished, or being deleted with no container running.
fn pod_is_terminated(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return true;
    }
    pod.metadata.deletion_timestamp.is_some()
        && !status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
}

fn resource_version(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The objects this controller wrote, newer than the informer's copies until the
/// informer catches up (upstream `storeObjectUpdate` into its own caches).
struct Written<K> {
    objects: Mutex<HashMap<String, Arc<K>>>,
}

impl<K: kube::Resource> Written<K> {
    fn new() -> Self {
        Written {
            objects: Mutex::new(HashMap::new()),
        }
    }

    fn note(&self, key: String, obj: K) {
        self.objects.lock().insert(key, Arc::new(obj));
    }

    fn forget(&self, key: &str) {
        self.objects.lock().remove(key);
    }

    /// The newer of the informer's `cached` copy and the written one. An object the
    /// informer no longer has is gone.
    fn newest(&self, key: &str, cached: Option<Arc<K>>) -> Option<Arc<K>> {
        let mut objects = self.objects.lock();
        let Some(cached) = cached else {
            objects.remove(key);
            return None;
        };
        match objects.get(key) {
            Some(mine)
                if mine.meta().uid == cached.meta().uid
                    && resource_version(mine.meta()) > resource_version(cached.meta()) =>
            {
                Some(mine.clone())
            }
            Some(_) => {
                objects.remove(key);
                Some(cached)
            }
            None => Some(cached),
        }
    }
}

/// Why a sync stopped.
enum SyncError {
    /// A write met a newer object (now re-read into the written objects).
    Conflict(kube::Error),
    Other(Error),
}

impl From<Error> for SyncError {
    fn from(e: Error) -> Self {
        SyncError::Other(e)
    }
}

impl From<kube::Error> for SyncError {
    fn from(e: kube::Error) -> Self {
        SyncError::Other(e.into())
    }
}

type Sync<T> = std::result::Result<T, SyncError>;

/// The PersistentVolume binder controller.
pub struct PersistentVolumeController {
    client: kube::Client,
    recorder: Arc<dyn EventSink>,
    volumes: Store<PersistentVolume>,
    claims: Store<PersistentVolumeClaim>,
    classes: Store<StorageClass>,
    pods: Store<Pod>,
    written_volumes: Written<PersistentVolume>,
    written_claims: Written<PersistentVolumeClaim>,
    sync_period: Duration,
    hostpath: HostPathPlugin,
    queue: OnceLock<WorkQueue<String>>,
}

/// How kube-controller-manager configures the controller.
#[derive(Debug, Clone)]
pub struct PersistentVolumeOptions {
    /// `--pvclaimbinder-sync-period`.
    pub sync_period: Duration,
    /// The hostPath plugin (`--enable-hostpath-provisioner`).
    pub hostpath: HostPathPlugin,
}

impl Default for PersistentVolumeOptions {
    fn default() -> Self {
        PersistentVolumeOptions {
            sync_period: DEFAULT_SYNC_PERIOD,
            hostpath: HostPathPlugin::new(false),
        }
    }
}

impl PersistentVolumeController {
    /// The controller on `factory`'s informers (volumes, claims, StorageClasses,
    /// pods), writing through `client`, with the default sync period.
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        recorder: Arc<dyn EventSink>,
    ) -> Result<Arc<Self>> {
        Self::with_options(
            factory,
            client,
            recorder,
            PersistentVolumeOptions::default(),
        )
    }

    /// [`Self::new`] with `--pvclaimbinder-sync-period`.
    pub fn with_sync_period(
        factory: &SharedInformerFactory,
        client: kube::Client,
        recorder: Arc<dyn EventSink>,
        sync_period: Duration,
    ) -> Result<Arc<Self>> {
        let options = PersistentVolumeOptions {
            sync_period,
            ..Default::default()
        };
        Self::with_options(factory, client, recorder, options)
    }

    /// [`Self::new`] as the flags configure it.
    pub fn with_options(
        factory: &SharedInformerFactory,
        client: kube::Client,
        recorder: Arc<dyn EventSink>,
        options: PersistentVolumeOptions,
    ) -> Result<Arc<Self>> {
        let pods = factory.informer::<Pod>();
        index_pods_by_claim(&pods)?;
        Ok(Arc::new(PersistentVolumeController {
            client,
            recorder,
            volumes: factory.informer::<PersistentVolume>().store(),
            claims: factory.informer::<PersistentVolumeClaim>().store(),
            classes: factory.informer::<StorageClass>().store(),
            pods: pods.store(),
            written_volumes: Written::new(),
            written_claims: Written::new(),
            sync_period: options.sync_period,
            hostpath: options.hostpath,
            queue: OnceLock::new(),
        }))
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.written_volumes.newest(name, self.volumes.get(name))
    }

    fn claim(&self, key: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.written_claims.newest(key, self.claims.get(key))
    }

    fn all_volumes(&self) -> Vec<Arc<PersistentVolume>> {
        let mut all: Vec<_> = self
            .volumes
            .list()
            .into_iter()
            .filter_map(|v| {
                let name = v.metadata.name.clone().unwrap_or_default();
                self.written_volumes.newest(&name, Some(v))
            })
            .collect();
        // A stable order: ties between equally good volumes go the same way each time.
        all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        all
    }

    /// The pods (by claim index) that reference `key` and are not terminated.
    fn pods_using(&self, key: &str) -> Result<Vec<Arc<Pod>>> {
        let mut pods: Vec<_> = self
            .pods
            .by_index(POD_CLAIM_INDEX, key)?
            .into_iter()
            .filter(|p| !pod_is_terminated(p))
            .collect();
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(pods)
    }

    fn volumes_api(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    fn claims_api(&self, claim: &PersistentVolumeClaim) -> Api<PersistentVolumeClaim> {
        Api::namespaced(
            self.client.clone(),
            claim.metadata.namespace.as_deref().unwrap_or(""),
        )
    }

    /// Writes the volume (`status`: through `/status`), keeping the answer; a 409
    /// re-reads it.
    async fn write_volume(
        &self,
        volume: &PersistentVolume,
        status: bool,
    ) -> Sync<PersistentVolume> {
        let api = self.volumes_api();
        let name = volume.metadata.name.clone().unwrap_or_default();
        let pp = PostParams::default();
        let result = if status {
            api.replace_status(&name, &pp, volume).await
        } else {
            api.replace(&name, &pp, volume).await
        };
        match result {
            Ok(new) => {
                self.written_volumes.note(name, new.clone());
                Ok(new)
            }
            Err(e) if is_conflict(&e) => {
                if let Some(fresh) = api.get_opt(&name).await? {
                    self.written_volumes.note(name, fresh);
                }
                Err(SyncError::Conflict(e))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the claim (`status`: through `/status`), keeping the answer; a 409
    /// re-reads it.
    async fn write_claim(
        &self,
        claim: &PersistentVolumeClaim,
        status: bool,
    ) -> Sync<PersistentVolumeClaim> {
        let api = self.claims_api(claim);
        let name = claim.metadata.name.clone().unwrap_or_default();
        let key = claim_key(claim);
        let pp = PostParams::default();
        let result = if status {
            api.replace_status(&name, &pp, claim).await
        } else {
            api.replace(&name, &pp, claim).await
        };
        match result {
            Ok(new) => {
                self.written_claims.note(key, new.clone());
                Ok(new)
            }
            Err(e) if is_conflict(&e) => {
                if let Some(fresh) = api.get_opt(&name).await? {
                    self.written_claims.note(key, fresh);
                }
                Err(SyncError::Conflict(e))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn emit_planned<K: kube::Resource<DynamicType = ()>>(&self, obj: &K, e: PlannedEvent) {
        emit(&*self.recorder, obj, e.type_, e.reason, e.message);
    }

    /// Upstream `updateVolumePhaseWithEvent`: the event only with the phase change.
    async fn set_volume_phase_with_event(
        &self,
        volume: &PersistentVolume,
        phase: &'static str,
        e: PlannedEvent,
    ) -> Sync<()> {
        if let Some(new) = volume_with_phase(volume, phase, &e.message, Timestamp::now()) {
            let written = self.write_volume(&new, true).await?;
            self.emit_planned(&written, e);
        }
        Ok(())
    }

    /// Upstream `updateClaimStatus` without a volume, after `e`.
    async fn set_claim_pending(
        &self,
        claim: &PersistentVolumeClaim,
        e: Option<PlannedEvent>,
    ) -> Sync<()> {
        if let Some(e) = e {
            self.emit_planned(claim, e);
        }
        if let Some(new) = claim_with_status(claim, "Pending", None).map_err(Error::Invalid)? {
            self.write_claim(&new, true).await?;
        }
        Ok(())
    }

    /// Upstream `bind`: four writes, each only when it changes something; a failed
    /// one leaves the rest to the next sync.
    async fn bind(&self, volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> Sync<()> {
        let mut volume = volume.clone();
        if let Some(new) = bind_volume_to_claim(&volume, claim) {
            volume = self.write_volume(&new, false).await?;
        }
        if let Some(new) = volume_with_phase(&volume, "Bound", "", Timestamp::now()) {
            volume = self.write_volume(&new, true).await?;
        }
        let mut claim = claim.clone();
        if let Some(new) = bind_claim_to_volume(&claim, &volume) {
            claim = self.write_claim(&new, false).await?;
        }
        if let Some(new) =
            claim_with_status(&claim, "Bound", Some(&volume)).map_err(Error::Invalid)?
        {
            self.write_claim(&new, true).await?;
        }
        Ok(())
    }

    async fn sync_claim(&self, key: &str) -> Sync<Action> {
        let Some(claim) = self.claim(key) else {
            return Ok(Action::Done);
        };
        let volumes = self.all_volumes();
        let refs: Vec<&PersistentVolume> = volumes.iter().map(|v| &**v).collect();
        let class_name = claim_class(&claim);
        let class = (!class_name.is_empty())
            .then(|| self.classes.get(class_name))
            .flatten();
        let unscheduled: Vec<String> = self
            .pods_using(key)?
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .unwrap_or("")
                    .is_empty()
            })
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let plan = plan_claim(&claim, &refs, class.as_deref(), &unscheduled);
        tracing::debug!(claim = key, ?plan, "syncing claim");
        match plan {
            ClaimPlan::Bind(name) => {
                let volume = refs
                    .iter()
                    .find(|v| v.metadata.name.as_deref() == Some(name.as_str()))
                    .ok_or_else(|| Error::Invalid(format!("volume {name:?} vanished")))?;
                self.bind(volume, &claim).await?;
            }
            ClaimPlan::Pending(e) => self.set_claim_pending(&claim, e).await?,
            ClaimPlan::Provision(provisioner) => {
                let mut claim = (*claim).clone();
                if let Some(new) = claim_with_provisioner(&claim, &provisioner) {
                    match self.write_claim(&new, false).await {
                        Ok(written) => claim = written,
                        Err(e) => {
                            let why = match &e {
                                SyncError::Conflict(k) => k.to_string(),
                                SyncError::Other(o) => o.to_string(),
                            };
                            self.emit_planned(
                                &claim,
                                event(
                                    EventType::Warning,
                                    "ProvisioningFailed",
                                    format!("Error saving claim: {why}"),
                                ),
                            );
                            return Err(e);
                        }
                    }
                }
                match class.as_deref() {
                    Some(class) if provisioner == hostpath::PLUGIN_NAME => {
                        self.provision_host_path(&claim, class).await?;
                    }
                    _ => self.emit_planned(
                        &claim,
                        event(
                            EventType::Normal,
                            "ExternalProvisioning",
                            external_provisioning_message(&provisioner),
                        ),
                    ),
                }
            }
            ClaimPlan::Event(e) => self.emit_planned(&*claim, e),
            ClaimPlan::Lost(e) => {
                if let Some(new) =
                    claim_with_status(&claim, "Lost", None).map_err(Error::Invalid)?
                {
                    let written = self.write_claim(&new, true).await?;
                    self.emit_planned(&written, e);
                }
            }
            ClaimPlan::Fail(why) => return Err(Error::Invalid(why).into()),
        }
        Ok(Action::RequeueAfter(self.sync_period))
    }

    /// The claim the volume's claimRef names, as upstream's `syncVolume` finds it:
    /// the cache, then (unless the volume is Released or Failed already) the
    /// apiserver; a claim of another uid is re-read before it counts as a new one.
    async fn claim_of_volume(
        &self,
        volume: &PersistentVolume,
        r: &ObjectReference,
    ) -> Sync<Option<Arc<PersistentVolumeClaim>>> {
        let key = claim_ref_key(r);
        let ns = r.namespace.as_deref().unwrap_or("");
        let name = r.name.as_deref().unwrap_or("");
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        let ref_uid = r.uid.as_deref().unwrap_or("");
        let mut claim = self.claim(&key);
        let phase = volume_phase(volume);
        if claim.is_none() && phase != "Released" && phase != "Failed" {
            claim = api.get_opt(name).await?.map(Arc::new);
        }
        if let Some(c) = &claim
            && uid(&c.metadata) != ref_uid
        {
            claim = api
                .get_opt(name)
                .await?
                .filter(|c| uid(&c.metadata) == ref_uid)
                .map(Arc::new);
        }
        Ok(claim)
    }

    async fn sync_volume(&self, name: &str) -> Sync<Action> {
        let Some(mut volume) = self.volume(name) else {
            return Ok(Action::Done);
        };
        if let Some(new) = volume_with_deletion_finalizer(&volume) {
            volume = Arc::new(self.write_volume(&new, false).await?);
        }
        let claim = match claim_ref(&volume) {
            Some(r) if !r.uid.as_deref().unwrap_or("").is_empty() => {
                self.claim_of_volume(&volume, r).await?
            }
            _ => None,
        };
        let plan = plan_volume(&volume, claim.as_deref());
        tracing::debug!(volume = name, ?plan, "syncing volume");
        match plan {
            VolumePlan::Phase(phase) => {
                if let Some(new) = volume_with_phase(&volume, phase, "", Timestamp::now()) {
                    self.write_volume(&new, true).await?;
                }
            }
            VolumePlan::Reclaim { release } => {
                let mut volume = (*volume).clone();
                if release
                    && let Some(new) = volume_with_phase(&volume, "Released", "", Timestamp::now())
                {
                    tracing::info!(volume = name, "volume is released");
                    volume = self.write_volume(&new, true).await?;
                }
                self.reclaim(&volume).await?;
            }
            VolumePlan::SyncClaim(key) => {
                if let Some(q) = self.queue.get() {
                    q.add(format!("{CLAIM_PREFIX}{key}"));
                }
            }
            VolumePlan::Mismatch {
                volume: volume_note,
                claim: claim_note,
            } => {
                self.emit_planned(
                    &*volume,
                    event(EventType::Warning, "VolumeMismatch", volume_note),
                );
                if let Some(c) = &claim {
                    self.emit_planned(
                        &**c,
                        event(EventType::Warning, "VolumeMismatch", claim_note),
                    );
                }
            }
            VolumePlan::Unbind => {
                let written = self.write_volume(&unbind_volume(&volume), false).await?;
                if let Some(new) = volume_with_phase(&written, "Available", "", Timestamp::now()) {
                    self.write_volume(&new, true).await?;
                }
            }
        }
        Ok(Action::RequeueAfter(self.sync_period))
    }

    /// Upstream `reclaimVolume` with its recycle and delete operations, which re-read
    /// the volume and check it is still released first.
    async fn reclaim(&self, volume: &PersistentVolume) -> Sync<()> {
        let plan = reclaim_plan(volume);
        let recycle = match plan {
            ReclaimPlan::Nothing => return Ok(()),
            ReclaimPlan::Fail(e) => {
                return self.set_volume_phase_with_event(volume, "Failed", e).await;
            }
            ReclaimPlan::Recycle => true,
            // An external deleter's job.
            ReclaimPlan::Delete if find_deleter(volume) == Deleter::External => return Ok(()),
            ReclaimPlan::Delete => false,
        };
        let name = volume.metadata.name.clone().unwrap_or_default();
        let Some(fresh) = self.volumes_api().get_opt(&name).await? else {
            return Ok(());
        };
        self.written_volumes.note(name.clone(), fresh.clone());
        let cached_claim = claim_ref(&fresh).and_then(|r| self.claim(&claim_ref_key(r)));
        if !is_volume_released(&fresh, cached_claim.as_deref()) {
            return Ok(());
        }
        if recycle {
            let key = claim_ref(&fresh).map(claim_ref_key).unwrap_or_default();
            let users: Vec<String> = self
                .pods_using(&key)?
                .iter()
                .map(|p| {
                    key_of(
                        p.metadata.namespace.as_deref(),
                        p.metadata.name.as_deref().unwrap_or(""),
                    )
                })
                .collect();
            if !users.is_empty() && cached_claim.is_none() {
                self.emit_planned(
                    &fresh,
                    event(
                        EventType::Normal,
                        "VolumeFailedRecycle",
                        format!("Volume is used by pods: {}", users.join(",")),
                    ),
                );
                return Ok(());
            }
            return self
                .set_volume_phase_with_event(
                    &fresh,
                    "Failed",
                    event(
                        EventType::Warning,
                        "VolumeFailedRecycle",
                        "No recycler plugin found for the volume!",
                    ),
                )
                .await;
        }
        match find_deleter(&fresh) {
            Deleter::External => Ok(()),
            Deleter::HostPath(path) => self.delete_host_path(&fresh, path).await,
            Deleter::Missing(why) => {
                self.set_volume_phase_with_event(
                    &fresh,
                    "Failed",
                    event(EventType::Warning, "VolumeFailedDelete", why),
                )
                .await
            }
        }
    }

    /// Upstream `deleteVolumeOperation` with the hostPath deleter: the directory, the
    /// in-tree finalizer, then the object.
    async fn delete_host_path(&self, volume: &PersistentVolume, path: String) -> Sync<()> {
        let deleted = tokio::task::spawn_blocking(move || hostpath::delete(&path))
            .await
            .map_err(|e| Error::Invalid(format!("the hostPath deleter panicked: {e}")))?;
        if let Err(why) = deleted {
            return self
                .set_volume_phase_with_event(
                    volume,
                    "Failed",
                    event(EventType::Warning, "VolumeFailedDelete", why),
                )
                .await;
        }
        let name = volume.metadata.name.clone().unwrap_or_default();
        let finalizers = volume.metadata.finalizers.as_deref().unwrap_or_default();
        if finalizers
            .iter()
            .any(|f| f == PV_IN_TREE_PROTECTION_FINALIZER)
        {
            let mut new = volume.clone();
            new.metadata.finalizers = Some(without_in_tree_finalizer(finalizers));
            self.write_volume(&new, false).await?;
        }
        tracing::info!(volume = name, "hostPath volume deleted");
        match self
            .volumes_api()
            .delete(&name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Upstream `provisionClaimOperation` with the hostPath plugin, once the claim names
    /// its provisioner: the directory, then the volume bound to the claim. A volume
    /// saved before (its name is the claim's UID) ends it.
    async fn provision_host_path(
        &self,
        claim: &PersistentVolumeClaim,
        class: &StorageClass,
    ) -> Sync<()> {
        let class_name = class.metadata.name.clone().unwrap_or_default();
        let failed = |message: String| event(EventType::Warning, "ProvisioningFailed", message);
        let pv_name = format!("pvc-{}", uid(&claim.metadata));
        if self.volumes_api().get_opt(&pv_name).await?.is_some() {
            return Ok(());
        }
        if let Some(options) = class.mount_options.as_ref().filter(|o| !o.is_empty()) {
            self.emit_planned(
                claim,
                failed(format!(
                    "Mount options are not supported by the provisioner but StorageClass {class_name:?} has mount options [{}]",
                    options.join(" ")
                )),
            );
            return Err(Error::Invalid(format!(
                "provisioner {:?} doesn't support mount options",
                hostpath::PLUGIN_NAME
            ))
            .into());
        }
        let reclaim = class
            .reclaim_policy
            .clone()
            .unwrap_or_else(|| "Delete".into());
        let plugin = self.hostpath.clone();
        let for_claim = claim.clone();
        let provisioned =
            tokio::task::spawn_blocking(move || plugin.provision(&for_claim, &pv_name, &reclaim))
                .await
                .map_err(|e| Error::Invalid(format!("the hostPath provisioner panicked: {e}")))?;
        let volume = match provisioned {
            Ok(v) => bound_provisioned_volume(v, claim),
            Err(e) => {
                let message = match e {
                    ProvisionError::Provisioner(e) => format!("Failed to create provisioner: {e}"),
                    ProvisionError::Provision(e) => {
                        format!("Failed to provision volume with StorageClass {class_name:?}: {e}")
                    }
                };
                self.emit_planned(claim, failed(message.clone()));
                return Err(Error::Invalid(message).into());
            }
        };
        let name = volume.metadata.name.clone().unwrap_or_default();
        match self
            .volumes_api()
            .create(&PostParams::default(), &volume)
            .await
        {
            Ok(new) => {
                self.written_volumes.note(name.clone(), new);
                self.emit_planned(
                    claim,
                    event(
                        EventType::Normal,
                        "ProvisioningSucceeded",
                        format!(
                            "Successfully provisioned volume {name} using {}",
                            hostpath::PLUGIN_NAME
                        ),
                    ),
                );
                Ok(())
            }
            Err(e) => {
                // The directory has no object: it goes again (also when another sync
                // saved the volume first, with a directory of its own).
                let path = volume
                    .spec
                    .and_then(|s| s.host_path)
                    .map(|h| h.path)
                    .unwrap_or_default();
                let exists = matches!(&e, kube::Error::Api(s) if s.code == 409);
                if !exists {
                    self.emit_planned(
                        claim,
                        failed(format!(
                            "Error creating provisioned PV object for claim {}: {}. Deleting the volume.",
                            claim_key(claim),
                            ferrokube_client::error_message(&e)
                        )),
                    );
                }
                let cleaned = tokio::task::spawn_blocking(move || hostpath::delete(&path))
                    .await
                    .map_err(|e| Error::Invalid(format!("the hostPath deleter panicked: {e}")))?;
                if let Err(why) = cleaned {
                    self.emit_planned(
                        claim,
                        event(
                            EventType::Warning,
                            "ProvisioningCleanupFailed",
                            format!(
                                "Error cleaning provisioned volume for claim {}: {why}. Please delete manually.",
                                claim_key(claim)
                            ),
                        ),
                    );
                }
                if exists { Ok(()) } else { Err(e.into()) }
            }
        }
    }
}

#[async_trait::async_trait]
impl Controller for PersistentVolumeController {
    fn name(&self) -> &'static str {
        "persistentvolume-binder-controller"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let _ = self.queue.set(queue.clone());
        let q = queue.clone();
        let this = self.clone();
        factory
            .informer::<PersistentVolumeClaim>()
            .add_event_handler(
                move |n: Notification<PersistentVolumeClaim>| {
                    let claim = n.object();
                    let key = claim_key(claim);
                    if let Notification::Deleted { .. } = n {
                        this.written_claims.forget(&key);
                        // Its volume is released now.
                        let volume = claim_volume_name(claim);
                        if !volume.is_empty() {
                            q.add(format!("{VOLUME_PREFIX}{volume}"));
                        }
                    } else {
                        q.add(format!("{CLAIM_PREFIX}{key}"));
                    }
                },
                None,
            );
        let q = queue.clone();
        let this = self;
        factory.informer::<PersistentVolume>().add_event_handler(
            move |n: Notification<PersistentVolume>| {
                let volume = n.object();
                let name = volume.metadata.name.clone().unwrap_or_default();
                if let Notification::Deleted { .. } = n {
                    this.written_volumes.forget(&name);
                    // Its claim is Lost now, not at the next resync.
                    if let Some(r) = claim_ref(volume) {
                        q.add(format!("{CLAIM_PREFIX}{}", claim_ref_key(r)));
                    }
                } else {
                    q.add(format!("{VOLUME_PREFIX}{name}"));
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let mut last = None;
        for _ in 0..CONFLICT_ATTEMPTS {
            let result = if let Some(k) = key.strip_prefix(CLAIM_PREFIX) {
                self.sync_claim(k).await
            } else if let Some(name) = key.strip_prefix(VOLUME_PREFIX) {
                self.sync_volume(name).await
            } else {
                return Err(Error::Invalid(format!("unknown key {key:?}")));
            };
            match result {
                Ok(action) => return Ok(action),
                Err(SyncError::Other(e)) => return Err(e),
                // The fresh copy is kept: plan again from it.
                Err(SyncError::Conflict(e)) => last = Some(e),
            }
        }
        match last {
            Some(e) => Err(e.into()),
            None => Ok(Action::Done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// `extra` merged over `base` (a JSON merge patch).
    fn merge(base: &mut Value, extra: Value) {
        *base = ferrokube_apimachinery::patch::merge_patch_value(base, &extra)
            .expect("a merge of JSON objects");
    }

    fn claim(extra: Value) -> PersistentVolumeClaim {
        let mut v = json!({"metadata": {"name": "data", "namespace": "ns", "uid": "c-uid",
                                        "resourceVersion": "7"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn volume(name: &str, size: &str, extra: Value) -> PersistentVolume {
        let mut v = json!({"metadata": {"name": name, "uid": format!("{name}-uid")},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": format!("/data/{name}")}},
            "status": {"phase": "Available"}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn class(name: &str, provisioner: &str, mode: Option<&str>) -> StorageClass {
        let mut v = json!({"metadata": {"name": name}, "provisioner": provisioner});
        if let Some(m) = mode {
            v["volumeBindingMode"] = json!(m);
        }
        serde_json::from_value(v).unwrap()
    }

    fn bound_ref(name: &str) -> Value {
        json!({"spec": {"claimRef": {"namespace": "ns", "name": name, "uid": "c-uid"}},
               "status": {"phase": "Bound"}})
    }

    const COMPLETED: &str = "pv.kubernetes.io/bind-completed";

    fn plan(c: &PersistentVolumeClaim, vs: &[PersistentVolume]) -> ClaimPlan {
        plan_claim(c, &vs.iter().collect::<Vec<_>>(), None, &[])
    }

    fn pending(reason: &'static str, type_: EventType, message: &str) -> ClaimPlan {
        ClaimPlan::Pending(Some(event(type_, reason, message)))
    }

    #[test]
    fn unbound_claims_take_the_best_volume_or_wait() {
        let no_pv = pending(
            "FailedBinding",
            EventType::Normal,
            "no persistent volumes available for this claim and no storage class is set",
        );
        let cases: Vec<(
            &str,
            PersistentVolumeClaim,
            Vec<PersistentVolume>,
            ClaimPlan,
        )> = vec![
            (
                "smallest fitting volume",
                claim(json!({})),
                vec![
                    volume("big", "10Gi", json!({})),
                    volume("fits", "1Gi", json!({})),
                    volume("tiny", "500Mi", json!({})),
                ],
                ClaimPlan::Bind("fits".into()),
            ),
            (
                "too large a request",
                claim(json!({"spec": {"resources": {"requests": {"storage": "20Gi"}}}})),
                vec![volume("big", "10Gi", json!({}))],
                no_pv.clone(),
            ),
            (
                "selector",
                claim(json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}})),
                vec![
                    volume("plain", "1Gi", json!({})),
                    volume(
                        "gold",
                        "9Gi",
                        json!({"metadata": {"labels": {"tier": "gold"}}}),
                    ),
                ],
                ClaimPlan::Bind("gold".into()),
            ),
            (
                "selector without a match",
                claim(json!({"spec": {"selector": {"matchLabels": {"tier": "gold"}}}})),
                vec![volume("plain", "1Gi", json!({}))],
                no_pv.clone(),
            ),
            (
                "another class",
                claim(json!({})),
                vec![volume(
                    "fast",
                    "1Gi",
                    json!({"spec": {"storageClassName": "fast"}}),
                )],
                no_pv.clone(),
            ),
            (
                "access modes: superset",
                claim(json!({})),
                vec![volume(
                    "rwx",
                    "1Gi",
                    json!({"spec": {"accessModes": ["ReadWriteOnce", "ReadWriteMany"]}}),
                )],
                ClaimPlan::Bind("rwx".into()),
            ),
            (
                "access modes: missing",
                claim(json!({"spec": {"accessModes": ["ReadWriteMany"]}})),
                vec![volume("rwo", "1Gi", json!({}))],
                no_pv.clone(),
            ),
            (
                "volume mode",
                claim(json!({"spec": {"volumeMode": "Block"}})),
                vec![volume("fs", "1Gi", json!({}))],
                no_pv.clone(),
            ),
            (
                "not Available yet",
                claim(json!({})),
                vec![volume(
                    "new",
                    "1Gi",
                    json!({"status": {"phase": "Pending"}}),
                )],
                no_pv.clone(),
            ),
            (
                "pre-bound to this claim wins over a smaller one",
                claim(json!({})),
                vec![
                    volume("small", "1Gi", json!({})),
                    volume(
                        "mine",
                        "5Gi",
                        json!({"spec": {"claimRef": {"namespace": "ns", "name": "data"}}}),
                    ),
                ],
                ClaimPlan::Bind("mine".into()),
            ),
            (
                "claimRef to another claim",
                claim(json!({})),
                vec![volume(
                    "theirs",
                    "1Gi",
                    json!({"spec": {"claimRef": {"namespace": "ns", "name": "other"}}}),
                )],
                no_pv.clone(),
            ),
            (
                "node affinity is the scheduler's",
                claim(json!({})),
                vec![volume(
                    "local",
                    "1Gi",
                    json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname",
                            "operator": "In", "values": ["nowhere"]}]}]}}}}),
                )],
                ClaimPlan::Bind("local".into()),
            ),
        ];
        for (name, c, vs, want) in cases {
            assert_eq!(plan(&c, &vs), want, "{name}");
        }
    }

    #[test]
    fn storage_classes_delay_or_provision() {
        let c = |class: &str, ann: Value| {
            claim(json!({"metadata": {"annotations": ann}, "spec": {"storageClassName": class}}))
        };
        let late = class("late", "example.com/late", Some("WaitForFirstConsumer"));
        let now = class("now", "example.com/now", Some("Immediate"));
        let intree = class("old", "kubernetes.io/no-provisioner", Some("Immediate"));
        let host_path = class("standard", hostpath::PLUGIN_NAME, Some("Immediate"));
        let unset = class("unset", "example.com/x", None);
        let vs = [volume(
            "late-pv",
            "1Gi",
            json!({"spec": {"storageClassName": "late"}}),
        )];
        let pre_bound = [volume(
            "late-pv",
            "1Gi",
            json!({"spec": {"storageClassName": "late",
                            "claimRef": {"namespace": "ns", "name": "data"}}}),
        )];
        let run = |c: &PersistentVolumeClaim,
                   vs: &[PersistentVolume],
                   class: Option<&StorageClass>,
                   pods: &[String]| {
            plan_claim(c, &vs.iter().collect::<Vec<_>>(), class, pods)
        };
        let selected = json!({"volume.kubernetes.io/selected-node": "node-a"});
        let cases = vec![
            (
                "delayed: not bound to a matching volume",
                run(&c("late", json!({})), &vs, Some(&late), &[]),
                pending(
                    "WaitForFirstConsumer",
                    EventType::Normal,
                    "waiting for first consumer to be created before binding",
                ),
            ),
            (
                "delayed: a pod waits to be scheduled",
                run(&c("late", json!({})), &[], Some(&late), &["web".into()]),
                pending(
                    "WaitForPodScheduled",
                    EventType::Normal,
                    "waiting for pod web to be scheduled",
                ),
            ),
            (
                "delayed: pods wait",
                run(
                    &c("late", json!({})),
                    &[],
                    Some(&late),
                    &["a".into(), "b".into()],
                ),
                pending(
                    "WaitForPodScheduled",
                    EventType::Normal,
                    "waiting for pods a,b to be scheduled",
                ),
            ),
            (
                "delayed: a pre-bound volume binds",
                run(&c("late", json!({})), &pre_bound, Some(&late), &[]),
                ClaimPlan::Bind("late-pv".into()),
            ),
            (
                "delayed: a node is selected, provisioning starts",
                run(&c("late", selected.clone()), &vs, Some(&late), &[]),
                ClaimPlan::Provision("example.com/late".into()),
            ),
            (
                "immediate: a matching volume",
                run(
                    &c("now", json!({})),
                    &[volume(
                        "n",
                        "1Gi",
                        json!({"spec": {"storageClassName": "now"}}),
                    )],
                    Some(&now),
                    &[],
                ),
                ClaimPlan::Bind("n".into()),
            ),
            (
                "immediate: provisioning",
                run(&c("now", json!({})), &vs, Some(&now), &[]),
                ClaimPlan::Provision("example.com/now".into()),
            ),
            (
                "in-tree provisioner",
                run(&c("old", json!({})), &[], Some(&intree), &[]),
                ClaimPlan::Event(event(
                    EventType::Warning,
                    "ProvisioningFailed",
                    "no volume plugin matched name: kubernetes.io/no-provisioner",
                )),
            ),
            (
                "the in-tree hostPath provisioner",
                run(&c("standard", json!({})), &[], Some(&host_path), &[]),
                ClaimPlan::Provision(hostpath::PLUGIN_NAME.into()),
            ),
            (
                "the hostPath provisioner and a data source",
                run(
                    &claim(json!({"spec": {"storageClassName": "standard",
                        "dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}})),
                    &[],
                    Some(&host_path),
                    &[],
                ),
                ClaimPlan::Event(event(
                    EventType::Warning,
                    "ProvisioningFailed",
                    "plugin \"kubernetes.io/host-path\" is not a CSI plugin. Only CSI plugin can provision a claim with a datasource",
                )),
            ),
            (
                "missing class",
                run(&c("gone", json!({})), &[], None, &[]),
                ClaimPlan::Event(event(
                    EventType::Warning,
                    "ProvisioningFailed",
                    "storageclass.storage.k8s.io \"gone\" not found",
                )),
            ),
            (
                "class without a binding mode",
                run(&c("unset", json!({})), &[], Some(&unset), &[]),
                ClaimPlan::Fail("VolumeBindingMode not set for StorageClass \"unset\"".into()),
            ),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn claims_naming_a_volume() {
        let pinned = |extra: Value| {
            let mut base = json!({"spec": {"volumeName": "v"}});
            merge(&mut base, extra);
            claim(base)
        };
        let cases = vec![
            ("missing volume", pinned(json!({})), vec![], ClaimPlan::Pending(None)),
            (
                "free and fitting",
                pinned(json!({})),
                vec![volume("v", "1Gi", json!({"status": {"phase": "Pending"}}))],
                ClaimPlan::Bind("v".into()),
            ),
            (
                "too small",
                pinned(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
                vec![volume("v", "1Gi", json!({}))],
                pending(
                    "VolumeMismatch",
                    EventType::Warning,
                    "Cannot bind to requested volume \"v\": requested PV is too small",
                ),
            ),
            (
                "another class",
                pinned(json!({})),
                vec![volume("v", "1Gi", json!({"spec": {"storageClassName": "x"}}))],
                pending(
                    "VolumeMismatch",
                    EventType::Warning,
                    "Cannot bind to requested volume \"v\": storageClassName does not match",
                ),
            ),
            (
                "access modes",
                pinned(json!({"spec": {"accessModes": ["ReadWriteMany"]}})),
                vec![volume("v", "1Gi", json!({}))],
                pending(
                    "VolumeMismatch",
                    EventType::Warning,
                    "Cannot bind to requested volume \"v\": incompatible accessMode",
                ),
            ),
            (
                "bound to it already",
                pinned(json!({})),
                vec![volume("v", "1Gi", bound_ref("data"))],
                ClaimPlan::Bind("v".into()),
            ),
            (
                "taken by another claim",
                pinned(json!({})),
                vec![volume("v", "1Gi", bound_ref("other"))],
                ClaimPlan::Pending(None),
            ),
            (
                "taken, and the controller bound us: never happens",
                pinned(json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}})),
                vec![volume("v", "1Gi", bound_ref("other"))],
                ClaimPlan::Fail(
                    "invalid binding of claim \"ns/data\" to volume \"v\": volume already claimed by \"ns/other\"".into(),
                ),
            ),
        ];
        for (name, c, vs, want) in cases {
            assert_eq!(plan(&c, &vs), want, "{name}");
        }
    }

    #[test]
    fn bound_claims_stay_bound_or_are_lost() {
        let bound = |volume_name: &str| {
            claim(json!({"metadata": {"annotations": {COMPLETED: "yes"}},
                         "spec": {"volumeName": volume_name}, "status": {"phase": "Bound"}}))
        };
        let lost =
            |reason, message: &str| ClaimPlan::Lost(event(EventType::Warning, reason, message));
        let cases = vec![
            (
                "all is well",
                bound("v"),
                vec![volume("v", "1Gi", bound_ref("data"))],
                ClaimPlan::Bind("v".into()),
            ),
            (
                "volume unbound meanwhile",
                bound("v"),
                vec![volume("v", "1Gi", json!({}))],
                ClaimPlan::Bind("v".into()),
            ),
            (
                "volume gone",
                bound("v"),
                vec![],
                lost(
                    "ClaimLost",
                    "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                ),
            ),
            (
                "volumeName cleared",
                bound(""),
                vec![],
                lost(
                    "ClaimLost",
                    "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
                ),
            ),
            (
                "volume bound to another claim",
                bound("v"),
                vec![volume(
                    "v",
                    "1Gi",
                    json!({"spec": {"claimRef": {"namespace": "ns", "name": "data", "uid": "x"}}}),
                )],
                lost(
                    "ClaimMisbound",
                    "Two claims are bound to the same volume, this one is bound incorrectly",
                ),
            ),
        ];
        for (name, c, vs, want) in cases {
            assert_eq!(plan(&c, &vs), want, "{name}");
        }
    }

    #[test]
    fn volumes_follow_their_claims() {
        let c = claim(json!({"spec": {"volumeName": "v"}}));
        let unbound_claim = claim(json!({}));
        let elsewhere = claim(json!({"spec": {"volumeName": "other"}}));
        let block = claim(json!({"spec": {"volumeMode": "Block"}}));
        let provisioned = json!({"metadata": {"annotations": {ANN_DYNAMICALLY_PROVISIONED: "example.com/p"}},
            "spec": {"persistentVolumeReclaimPolicy": "Delete",
                     "claimRef": {"namespace": "ns", "name": "data", "uid": "c-uid"}},
            "status": {"phase": "Bound"}});
        let cases: Vec<(&str, PersistentVolume, Option<&PersistentVolumeClaim>, VolumePlan)> = vec![
            ("unused", volume("v", "1Gi", json!({"status": {"phase": "Pending"}})), None, VolumePlan::Phase("Available")),
            (
                "pre-bound by the user",
                volume("v", "1Gi", json!({"spec": {"claimRef": {"namespace": "ns", "name": "data"}}})),
                None,
                VolumePlan::Phase("Available"),
            ),
            ("claim gone", volume("v", "1Gi", bound_ref("data")), None, VolumePlan::Reclaim { release: true }),
            (
                "claim gone, already released",
                volume("v", "1Gi", json!({"spec": {"claimRef": {"namespace": "ns", "name": "data", "uid": "c-uid"}},
                    "status": {"phase": "Released"}})),
                None,
                VolumePlan::Reclaim { release: false },
            ),
            (
                "claim not bound yet",
                volume("v", "1Gi", bound_ref("data")),
                Some(&unbound_claim),
                VolumePlan::SyncClaim("ns/data".into()),
            ),
            ("all bound", volume("v", "1Gi", bound_ref("data")), Some(&c), VolumePlan::Phase("Bound")),
            (
                "volume modes differ",
                volume("v", "1Gi", bound_ref("data")),
                Some(&block),
                VolumePlan::Mismatch {
                    volume: "Cannot bind PersistentVolume to requested PersistentVolumeClaim \"data\" due to incompatible volumeMode.".into(),
                    claim: "Cannot bind PersistentVolume \"v\" to requested PersistentVolumeClaim due to incompatible volumeMode.".into(),
                },
            ),
            ("claim bound elsewhere", volume("v", "1Gi", bound_ref("data")), Some(&elsewhere), VolumePlan::Unbind),
            (
                "provisioned for a claim bound elsewhere",
                volume("v", "1Gi", provisioned),
                Some(&elsewhere),
                VolumePlan::Reclaim { release: true },
            ),
        ];
        for (name, v, c, want) in cases {
            assert_eq!(plan_volume(&v, c), want, "{name}");
        }
    }

    #[test]
    fn reclaim_policies() {
        let with = |policy: &str, ann: Value| {
            volume(
                "v",
                "1Gi",
                json!({"metadata": {"annotations": ann},
                "spec": {"persistentVolumeReclaimPolicy": policy}}),
            )
        };
        assert_eq!(
            reclaim_plan(&with("Retain", json!({}))),
            ReclaimPlan::Nothing
        );
        assert_eq!(
            reclaim_plan(&with("Recycle", json!({}))),
            ReclaimPlan::Recycle
        );
        assert_eq!(
            reclaim_plan(&with("Delete", json!({}))),
            ReclaimPlan::Delete
        );
        assert_eq!(
            reclaim_plan(&with("Delete", json!({ANN_MIGRATED_TO: "ebs.csi.aws.com"}))),
            ReclaimPlan::Nothing
        );
        assert_eq!(
            reclaim_plan(&with("Shred", json!({}))),
            ReclaimPlan::Fail(event(
                EventType::Warning,
                "VolumeUnknownReclaimPolicy",
                "Volume has unrecognized PersistentVolumeReclaimPolicy"
            ))
        );
        // External provisioners delete their volumes; of the in-tree plugins only
        // hostPath's deleter is there, found by the provisioner's name or the source.
        let local = json!({"hostPath": null, "local": {"path": "/mnt/v"}});
        let with_source = |ann: Value, source: Value| {
            let mut extra = json!({"metadata": {"annotations": ann},
                "spec": {"persistentVolumeReclaimPolicy": "Delete"}});
            for (k, v) in source.as_object().into_iter().flatten() {
                extra["spec"][k] = v.clone();
            }
            volume("v", "1Gi", extra)
        };
        let cases = [
            (json!({ANN_DYNAMICALLY_PROVISIONED: "rancher.io/local-path"}), json!({}), Deleter::External),
            (json!({ANN_DYNAMICALLY_PROVISIONED: "kubernetes.io/host-path"}), json!({}), Deleter::HostPath("/data/v".into())),
            (json!({}), json!({}), Deleter::HostPath("/data/v".into())),
            (
                json!({ANN_DYNAMICALLY_PROVISIONED: "kubernetes.io/host-path"}),
                local.clone(),
                Deleter::Missing("failed to create deleter for volume \"v\": spec.PersistentVolumeSource.HostPath is nil".into()),
            ),
            (
                json!({ANN_DYNAMICALLY_PROVISIONED: "kubernetes.io/aws-ebs"}),
                json!({}),
                Deleter::Missing("no volume plugin matched name: kubernetes.io/aws-ebs".into()),
            ),
            (
                json!({}),
                local,
                Deleter::Missing("error getting deleter volume plugin for volume \"v\": no volume plugin matched".into()),
            ),
        ];
        for (ann, source, want) in cases {
            assert_eq!(
                find_deleter(&with_source(ann.clone(), source.clone())),
                want,
                "{ann} {source}"
            );
        }
    }

    #[test]
    fn in_tree_volumes_keep_the_finalizer_while_their_policy_is_delete() {
        let provisioned = |policy: &str, finalizers: Value| {
            volume(
                "v",
                "1Gi",
                json!({"metadata": {"annotations": {ANN_DYNAMICALLY_PROVISIONED: hostpath::PLUGIN_NAME},
                                    "finalizers": finalizers},
                       "spec": {"persistentVolumeReclaimPolicy": policy}}),
            )
        };
        let finalizers =
            |v: Option<PersistentVolume>| v.map(|v| v.metadata.finalizers.unwrap_or_default());
        let protection = "kubernetes.io/pv-protection".to_string();
        let in_tree = PV_IN_TREE_PROTECTION_FINALIZER.to_string();
        assert_eq!(
            finalizers(volume_with_deletion_finalizer(&provisioned(
                "Delete",
                json!([protection])
            ))),
            Some(vec![protection.clone(), in_tree.clone()])
        );
        assert_eq!(
            volume_with_deletion_finalizer(&provisioned("Delete", json!([protection, in_tree]))),
            None
        );
        assert_eq!(
            finalizers(volume_with_deletion_finalizer(&provisioned(
                "Retain",
                json!([in_tree, protection])
            ))),
            Some(vec![protection.clone()])
        );
        assert_eq!(
            volume_with_deletion_finalizer(&provisioned("Retain", json!([]))),
            None
        );
        // Being deleted: nothing is added.
        let mut deleting = provisioned("Delete", json!([]));
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert_eq!(volume_with_deletion_finalizer(&deleting), None);
        // Not provisioned in-tree: left alone.
        let external = volume(
            "v",
            "1Gi",
            json!({"metadata": {"annotations": {ANN_DYNAMICALLY_PROVISIONED: "example.com/p"}},
                   "spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
        );
        assert_eq!(volume_with_deletion_finalizer(&external), None);
    }

    #[test]
    fn a_provisioned_volume_is_saved_bound_to_its_claim() {
        let c = claim(json!({"spec": {"storageClassName": "standard"}}));
        let made = hostpath::provisioned_volume(&c, "pvc-c-uid", "/tmp/hostpath_pv/x", "Delete");
        let v = bound_provisioned_volume(made, &c);
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            json!({"apiVersion": "v1", "kind": "PersistentVolume",
                   "metadata": {"name": "pvc-c-uid",
                    "annotations": {"kubernetes.io/createdby": "hostpath-dynamic-provisioner",
                                    "pv.kubernetes.io/bound-by-controller": "yes",
                                    "pv.kubernetes.io/provisioned-by": "kubernetes.io/host-path"},
                    "finalizers": ["kubernetes.io/pv-controller"]},
                   "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                         "namespace": "ns", "name": "data", "uid": "c-uid",
                                         "resourceVersion": "7"},
                            "hostPath": {"path": "/tmp/hostpath_pv/x"},
                            "persistentVolumeReclaimPolicy": "Delete",
                            "storageClassName": "standard"},
                   "status": {"phase": "Bound"}})
        );
        let retained = bound_provisioned_volume(
            hostpath::provisioned_volume(&c, "pvc-c-uid", "/tmp/hostpath_pv/x", "Retain"),
            &c,
        );
        assert_eq!(retained.metadata.finalizers, None);
    }

    #[test]
    fn released_means_the_claim_is_gone_or_elsewhere() {
        let v = volume("v", "1Gi", bound_ref("data"));
        assert!(is_volume_released(&v, None));
        assert!(!is_volume_released(
            &v,
            Some(&claim(json!({"spec": {"volumeName": "v"}})))
        ));
        assert!(!is_volume_released(&v, Some(&claim(json!({})))));
        assert!(is_volume_released(
            &v,
            Some(&claim(json!({"spec": {"volumeName": "w"}})))
        ));
        assert!(is_volume_released(
            &v,
            Some(&claim(json!({"metadata": {"uid": "new"}})))
        ));
        let pre_bound = volume(
            "v",
            "1Gi",
            json!({"spec": {"claimRef": {"namespace": "ns", "name": "data"}}}),
        );
        assert!(!is_volume_released(&pre_bound, None));
        assert!(!is_volume_released(&volume("v", "1Gi", json!({})), None));
    }

    #[test]
    fn binding_edits_both_objects() {
        let c = claim(json!({}));
        let v = volume("v", "2Gi", json!({}));
        let now = Timestamp::from_second(1_800_000_000).unwrap();

        // The controller's choice: both sides say so.
        let bound = bind_volume_to_claim(&v, &c).expect("claimRef set");
        let r = claim_ref(&bound).unwrap();
        assert_eq!(
            (
                r.kind.as_deref(),
                r.api_version.as_deref(),
                r.namespace.as_deref(),
                r.name.as_deref(),
                r.uid.as_deref(),
                r.resource_version.as_deref()
            ),
            (
                Some("PersistentVolumeClaim"),
                Some("v1"),
                Some("ns"),
                Some("data"),
                Some("c-uid"),
                Some("7")
            )
        );
        assert_eq!(
            annotation(&bound.metadata, ANN_BOUND_BY_CONTROLLER),
            Some("yes")
        );
        assert_eq!(bind_volume_to_claim(&bound, &c), None);
        let bound = volume_with_phase(&bound, "Bound", "", now).unwrap();
        assert_eq!(volume_phase(&bound), "Bound");
        assert!(
            bound
                .status
                .as_ref()
                .unwrap()
                .last_phase_transition_time
                .is_some()
        );
        assert_eq!(volume_with_phase(&bound, "Bound", "", now), None);

        let c2 = bind_claim_to_volume(&c, &bound).unwrap();
        assert_eq!(claim_volume_name(&c2), "v");
        assert_eq!(annotation(&c2.metadata, ANN_BIND_COMPLETED), Some("yes"));
        assert_eq!(
            annotation(&c2.metadata, ANN_BOUND_BY_CONTROLLER),
            Some("yes")
        );
        assert_eq!(bind_claim_to_volume(&c2, &bound), None);
        let c3 = claim_with_status(&c2, "Bound", Some(&bound))
            .unwrap()
            .unwrap();
        let st = c3.status.clone().unwrap();
        assert_eq!(st.phase.as_deref(), Some("Bound"));
        assert_eq!(st.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
        assert_eq!(st.capacity.unwrap()["storage"].0, "2Gi");
        assert_eq!(claim_with_status(&c3, "Bound", Some(&bound)).unwrap(), None);
        // Lost or Pending drop what the volume gave.
        let lost = claim_with_status(&c3, "Lost", None).unwrap().unwrap();
        let st = lost.status.unwrap();
        assert_eq!(
            (st.phase.as_deref(), st.access_modes, st.capacity),
            (Some("Lost"), None, None)
        );

        // The user's choice: no bound-by-controller where the user bound.
        let pinned = claim(json!({"spec": {"volumeName": "v"}}));
        let c4 = bind_claim_to_volume(&pinned, &bound).unwrap();
        assert!(!has_annotation(&c4.metadata, ANN_BOUND_BY_CONTROLLER));
        assert_eq!(annotation(&c4.metadata, ANN_BIND_COMPLETED), Some("yes"));
        let reserved = volume(
            "r",
            "1Gi",
            json!({"spec": {"claimRef": {"namespace": "ns", "name": "data"}}}),
        );
        let r2 = bind_volume_to_claim(&reserved, &c).unwrap();
        assert!(!has_annotation(&r2.metadata, ANN_BOUND_BY_CONTROLLER));
        assert_eq!(claim_ref(&r2).unwrap().uid.as_deref(), Some("c-uid"));

        // A pre-resize capacity wins; no storage capacity is an error.
        let resized = volume(
            "v",
            "2Gi",
            json!({"metadata": {"annotations": {ANN_PRE_RESIZE_CAPACITY: "1Gi"}}}),
        );
        let c5 = claim_with_status(&c2, "Bound", Some(&resized))
            .unwrap()
            .unwrap();
        assert_eq!(c5.status.unwrap().capacity.unwrap()["storage"].0, "1Gi");
        let mut no_cap = v.clone();
        no_cap.spec.as_mut().unwrap().capacity = None;
        assert!(claim_with_status(&c2, "Bound", Some(&no_cap)).is_err());
    }

    #[test]
    fn unbinding_and_provisioner_annotations() {
        let by_controller = volume(
            "v",
            "1Gi",
            json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}},
            "spec": {"claimRef": {"namespace": "ns", "name": "data", "uid": "c-uid"}}}),
        );
        let u = unbind_volume(&by_controller);
        assert!(claim_ref(&u).is_none());
        assert!(u.metadata.annotations.is_none());
        let by_user = volume("v", "1Gi", bound_ref("data"));
        let u = unbind_volume(&by_user);
        let r = claim_ref(&u).unwrap();
        assert_eq!((r.name.as_deref(), r.uid.as_deref()), (Some("data"), None));

        let c = claim_with_provisioner(&claim(json!({})), "example.com/p").unwrap();
        assert_eq!(
            annotation(&c.metadata, ANN_STORAGE_PROVISIONER),
            Some("example.com/p")
        );
        assert_eq!(
            annotation(&c.metadata, ANN_BETA_STORAGE_PROVISIONER),
            Some("example.com/p")
        );
        assert_eq!(claim_with_provisioner(&c, "example.com/p"), None);
        assert_eq!(
            external_provisioning_message("example.com/p"),
            "Waiting for a volume to be created either by the external provisioner 'example.com/p' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
        );
    }

    #[test]
    fn written_objects_win_until_the_informer_catches_up() {
        let w: Written<PersistentVolume> = Written::new();
        let at = |rv: &str| {
            let mut v = volume("v", "1Gi", json!({}));
            v.metadata.resource_version = Some(rv.into());
            Arc::new(v)
        };
        w.note("v".into(), (*at("5")).clone());
        assert_eq!(
            w.newest("v", Some(at("4")))
                .unwrap()
                .metadata
                .resource_version
                .as_deref(),
            Some("5")
        );
        assert_eq!(
            w.newest("v", Some(at("6")))
                .unwrap()
                .metadata
                .resource_version
                .as_deref(),
            Some("6")
        );
        // Caught up: the written copy is dropped.
        assert_eq!(
            w.newest("v", Some(at("4")))
                .unwrap()
                .metadata
                .resource_version
                .as_deref(),
            Some("4")
        );
        w.note("v".into(), (*at("9")).clone());
        assert!(w.newest("v", None).is_none());
        assert!(w.objects.lock().is_empty());
    }
}
