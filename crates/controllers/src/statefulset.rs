//! The StatefulSet controller (upstream `pkg/controller/statefulset`, v1.33): pods with
//! stable names, hostnames and claims, created, scaled down and updated in order.
//!
//! What it does, as upstream:
//! - one pod per ordinal in `[start, start + replicas)` (`spec.ordinals.start`), named
//!   `<set>-<ordinal>`, with the template's labels plus `statefulset.kubernetes.io/pod-name`,
//!   `apps.kubernetes.io/pod-index` and `controller-revision-hash` (the revision's name),
//!   hostname `<set>-<ordinal>`, subdomain `spec.serviceName`, owned by the set;
//! - for every `volumeClaimTemplate` a claim `<template>-<set>-<ordinal>` (labels of the
//!   template plus the selector's matchLabels) created before its pod, and the pod's
//!   volume of that name pointing at it;
//! - `OrderedReady`: a pod is created only when every lower ordinal is Running, Ready
//!   and available (`minReadySeconds`); scale-down removes the highest ordinal first,
//!   one at a time, only while the others are healthy. `Parallel` does not wait;
//! - failed or succeeded pods are deleted, and recreated under the same name once gone;
//! - revisions as ControllerRevisions `<set>-<hash>` (data `{"spec":{"template":...,
//!   "$patch":"replace"}}`, increasing `revision`, an equivalent older revision is
//!   re-numbered rather than duplicated), trimmed to `revisionHistoryLimit`;
//! - `RollingUpdate` (partition honoured, maxUnavailable 1 as with the
//!   `MaxUnavailableStatefulSet` gate off): the highest ordinal not at the update
//!   revision is deleted, waiting for every pod from there up to be healthy again;
//!   pods below the partition are (re)created at the current revision. `OnDelete`:
//!   pods are replaced only when deleted by someone else;
//! - status (`/status`, `replace_status` retried once on conflict): replicas, ready,
//!   available, current, updated, current/update revision (current moves to update once
//!   every pod is updated and ready), observedGeneration, collisionCount;
//! - pods are the set's by controllerRef, selector and `<set>-<ordinal>` name: matching
//!   orphans are adopted, owned pods that stop matching are released;
//! - events `SuccessfulCreate` / `SuccessfulDelete` / `FailedCreate` / `FailedDelete`
//!   with upstream's messages.
//!
//! `persistentVolumeClaimRetentionPolicy` (upstream `ClaimsMatchRetentionPolicy` and
//! `updateClaimOwnerRefForSetAndPod`), kept on every sync for the claims of every pod
//! that is not terminating: `whenDeleted: Delete` gives a claim an ownerReference to the
//! set (set already when the controller creates it); `whenScaled: Delete` gives the
//! claims of a pod out of the ordinal range (scaled down) an ownerReference to that pod
//! instead, before it is deleted, and takes it off again when the set scales back up
//! first; `Retain` takes these references off. So a policy changed later applies to
//! claims that exist, and the garbage collector deletes claims whose owner went. A
//! claim controlled by some other owner is left alone, as upstream does. A pod is not
//! created on a claim that is being deleted or still owned by an earlier pod (upstream
//! `PodClaimIsStale`); claims are not watched, so that case is polled.
//!
//! Other deviations: the revision hash is FNV-32a over this controller's JSON of the
//! revision data (upstream hashes Go's printing of the object), so names differ from
//! upstream's for the same template but are stable here; `maxUnavailable` is ignored
//! (its gate is alpha, so upstream ignores it by default too); no
//! `StatefulSetCondition`s.
//! In `Parallel` mode a sync's writes run concurrently in slow-start batches (upstream's
//! `runForAll`), stopping after a batch with a failure.
//!
//! Pure part: [`parent_and_ordinal`], [`may_claim`], [`identity_matches`], [`new_pod`],
//! [`claims_for`], [`revision_data`], [`revision_hash`], [`plan`] (every write of one
//! sync, per policy and strategy), [`compute_status`]. IO part:
//! [`StatefulSetController`].

use ferrokube_client::error_message;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use serde_json::json;

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::replicaset::{
    ClaimingOwner, SLOW_START_INITIAL_BATCH, claim_pods, is_conflict, is_not_found,
    slow_start_batch,
};
use crate::util::{
    controller_of, is_pod_available, is_pod_ready, labels, new_controller_ref, pod_phase,
    seconds_until_available, selector_is_empty, selector_matches,
};
use crate::{Action, Controller, Error, Result, replace_status_retrying, split_key};

/// The pod label holding the pod's name.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The pod label holding the pod's ordinal (PodIndexLabel, GA).
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The pod label holding the name of the pod's ControllerRevision.
pub const REVISION_LABEL: &str = "controller-revision-hash";
/// How often a pod waiting for a stale claim to be deleted is retried.
const STALE_CLAIM_POLL: Duration = Duration::from_secs(2);
/// The ControllerRevision label holding its hash (upstream `ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

// ---------------------------------------------------------------------------------
// Pure part
// ---------------------------------------------------------------------------------

/// The parts of a set that planning needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetParams {
    pub name: String,
    pub start: i32,
    pub replicas: i32,
    /// `OrderedReady` (upstream's "monotonic").
    pub ordered: bool,
    /// `RollingUpdate`; `None` for `OnDelete`. The value is the partition.
    pub rolling_partition: Option<i32>,
    pub min_ready_seconds: i32,
    pub deleting: bool,
}

impl SetParams {
    pub fn of(set: &StatefulSet) -> SetParams {
        let spec = set.spec.clone().unwrap_or_default();
        let strategy = spec.update_strategy.unwrap_or_default();
        let rolling = strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate";
        SetParams {
            name: set.metadata.name.clone().unwrap_or_default(),
            start: spec.ordinals.and_then(|o| o.start).unwrap_or(0),
            replicas: spec.replicas.unwrap_or(1).max(0),
            ordered: spec.pod_management_policy.as_deref() != Some("Parallel"),
            rolling_partition: rolling.then(|| {
                strategy
                    .rolling_update
                    .and_then(|r| r.partition)
                    .unwrap_or(0)
            }),
            min_ready_seconds: spec.min_ready_seconds.unwrap_or(0),
            deleting: set.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// Upstream `getParentNameAndOrdinal`: `web-3` → (`web`, 3).
pub fn parent_and_ordinal(pod_name: &str) -> Option<(&str, i32)> {
    let (parent, ord) = pod_name.rsplit_once('-')?;
    if ord.is_empty() || !ord.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parent, ord.parse().ok()?))
}

fn pod_name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

fn ordinal_of(p: &Pod) -> i32 {
    parent_and_ordinal(pod_name(p)).map_or(-1, |(_, o)| o)
}

fn revision_of(p: &Pod) -> &str {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map_or("", String::as_str)
}

fn is_terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

fn is_running_and_ready(p: &Pod) -> bool {
    pod_phase(p) == "Running" && is_pod_ready(p)
}

fn is_running_and_available(p: &Pod, min_ready: i32, now: Timestamp) -> bool {
    pod_phase(p) == "Running" && is_pod_available(p, min_ready, now)
}

/// Upstream `isHealthy`.
fn is_healthy(p: &Pod) -> bool {
    is_running_and_ready(p) && !is_terminating(p)
}

fn is_finished(p: &Pod) -> bool {
    matches!(pod_phase(p), "Failed" | "Succeeded")
}

/// Whether `pod` is one the set may hold: its selector (never empty) matches and the
/// name is `<set>-<ordinal>` (upstream's `ClaimPods` match with `isMemberOf`).
pub fn may_claim(set: &StatefulSet, pod: &Pod) -> bool {
    let Some(spec) = set.spec.as_ref() else {
        return false;
    };
    let set_name = set.metadata.name.as_deref().unwrap_or_default();
    !selector_is_empty(&spec.selector)
        && selector_matches(&spec.selector, &labels(&pod.metadata))
        && parent_and_ordinal(pod_name(pod)).is_some_and(|(parent, _)| parent == set_name)
}

/// Upstream `identityMatches`: name, namespace-free part and the identity labels.
pub fn identity_matches(set: &str, p: &Pod) -> bool {
    let name = pod_name(p);
    let labels = p.metadata.labels.clone().unwrap_or_default();
    parent_and_ordinal(name).is_some_and(|(parent, _)| parent == set)
        && labels.get(POD_NAME_LABEL).map(String::as_str) == Some(name)
        && labels.get(POD_INDEX_LABEL).map(String::as_str)
            == Some(ordinal_of(p).to_string().as_str())
}

/// Which revision a pod to create is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rev {
    Current,
    Update,
}

/// One write of a sync, in the order upstream makes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create the pod (and first its missing claims) of this ordinal.
    Create(i32, Rev),
    /// Delete a failed or succeeded pod (recreated once it is gone).
    DeleteFinished(String),
    /// Create a pending pod's missing claims.
    CreateMissingClaims(String),
    /// Put the identity labels back on a pod.
    FixIdentity(String),
    /// Delete a pod beyond the replica count (scale-down).
    Condemn(String),
    /// Delete a pod not at the update revision (rolling update).
    Roll(String),
}

/// What a step's write changed that the sync needs afterwards.
#[derive(Debug, Default)]
struct StepDone {
    /// The pod was not created: a claim of its is stale (polled, claims are not
    /// watched).
    stale_claims: bool,
    /// A pod at the current revision was deleted by the rolling update.
    rolled_current: bool,
}

/// Upstream `newVersionedStatefulSetPod`'s choice of revision for a new pod.
pub fn revision_for(p: &SetParams, ordinal: i32) -> Rev {
    // Defaulting always gives RollingUpdate a partition, so upstream's branch for a
    // missing `rollingUpdate` (keep `currentReplicas` pods current) does not occur.
    match p.rolling_partition {
        Some(partition) if ordinal < p.start + partition => Rev::Current,
        _ => Rev::Update,
    }
}

/// Upstream `updateStatefulSet` + `updateStatefulSetAfterInvariantEstablished`: the
/// writes of one sync. `pods` are the set's pods; `current`/`update` revision names.
pub fn plan(p: &SetParams, pods: &[&Pod], update: &str, now: Timestamp) -> Vec<Step> {
    let n = p.replicas.max(0) as usize;
    let mut replicas: Vec<Option<&Pod>> = vec![None; n];
    let mut condemned: Vec<&Pod> = Vec::new();
    for &pod in pods {
        let ord = ordinal_of(pod);
        if ord >= p.start && ord < p.start + p.replicas {
            replicas[(ord - p.start) as usize] = Some(pod);
        } else if ord >= 0 {
            condemned.push(pod);
        }
    }
    // Highest ordinal first.
    condemned.sort_by_key(|c| std::cmp::Reverse(ordinal_of(c)));
    // A condemned pod can be the first unhealthy one only when every replica is healthy.
    let replica_unhealthy = replicas.iter().any(|r| r.is_none_or(|r| !is_healthy(r)));
    let first_unhealthy: Option<&Pod> = if replica_unhealthy {
        None
    } else {
        condemned.iter().rev().copied().find(|c| !is_healthy(c))
    };
    if p.deleting {
        return Vec::new();
    }
    let mut steps = Vec::new();
    for (i, slot) in replicas.iter().enumerate() {
        let ord = p.start + i as i32;
        let Some(pod) = slot else {
            steps.push(Step::Create(ord, revision_for(p, ord)));
            if p.ordered {
                return steps;
            }
            continue;
        };
        if is_finished(pod) {
            if !is_terminating(pod) {
                steps.push(Step::DeleteFinished(pod_name(pod).into()));
            }
            // The replacement comes once the pod is gone; OrderedReady waits for it.
            if p.ordered {
                return steps;
            }
            continue;
        }
        if pod_phase(pod) == "Pending" {
            steps.push(Step::CreateMissingClaims(pod_name(pod).into()));
        }
        if p.ordered
            && (is_terminating(pod)
                || !is_running_and_ready(pod)
                || !is_running_and_available(pod, p.min_ready_seconds, now))
        {
            return steps;
        }
        if !identity_matches(&p.name, pod) {
            steps.push(Step::FixIdentity(pod_name(pod).into()));
        }
    }
    for c in &condemned {
        if is_terminating(c) {
            if p.ordered {
                return steps;
            }
            continue;
        }
        let first = first_unhealthy.is_some_and(|f| std::ptr::eq(f, *c));
        if p.ordered
            && !first
            && (!is_running_and_ready(c) || !is_running_and_available(c, p.min_ready_seconds, now))
        {
            return steps;
        }
        steps.push(Step::Condemn(pod_name(c).into()));
        if p.ordered {
            return steps;
        }
    }
    let Some(partition) = p.rolling_partition else {
        return steps;
    };
    let update_min = partition.max(0) as usize;
    for target in (update_min..n).rev() {
        let Some(pod) = replicas[target] else {
            return steps;
        };
        if revision_of(pod) != update && !is_terminating(pod) {
            steps.push(Step::Roll(pod_name(pod).into()));
            return steps;
        }
        if !is_healthy(pod) {
            return steps;
        }
    }
    steps
}

/// Upstream `computeReplicaStatus` + `completeRollingUpdate`.
pub fn compute_status(
    p: &SetParams,
    pods: &[&Pod],
    current: &str,
    update: &str,
    generation: Option<i64>,
    collision_count: Option<i32>,
    now: Timestamp,
) -> StatefulSetStatus {
    let mut st = StatefulSetStatus {
        replicas: 0,
        ready_replicas: Some(0),
        available_replicas: Some(0),
        current_replicas: Some(0),
        updated_replicas: Some(0),
        current_revision: Some(current.to_string()),
        update_revision: Some(update.to_string()),
        observed_generation: generation,
        collision_count,
        conditions: None,
    };
    let inc = |v: &mut Option<i32>| *v = Some(v.unwrap_or(0) + 1);
    for pod in pods {
        st.replicas += 1;
        if is_running_and_ready(pod) {
            inc(&mut st.ready_replicas);
            if is_running_and_available(pod, p.min_ready_seconds, now) {
                inc(&mut st.available_replicas);
            }
        }
        if !is_terminating(pod) {
            if revision_of(pod) == current {
                inc(&mut st.current_replicas);
            }
            if revision_of(pod) == update {
                inc(&mut st.updated_replicas);
            }
        }
    }
    if p.rolling_partition.is_some()
        && st.updated_replicas == Some(st.replicas)
        && st.ready_replicas == Some(st.replicas)
    {
        st.current_replicas = st.updated_replicas;
        st.current_revision = st.update_revision.clone();
    }
    st
}

/// The claims of the pod with `ordinal` (upstream `getPersistentVolumeClaims`).
pub fn claims_for(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let spec = set.spec.clone().unwrap_or_default();
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let sel = spec.selector.match_labels.clone().unwrap_or_default();
    spec.volume_claim_templates
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let tname = t.metadata.name.clone().unwrap_or_default();
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(sel.clone());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(format!("{tname}-{set_name}-{ordinal}")),
                    namespace: set.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: t.metadata.annotations.clone(),
                    ..Default::default()
                },
                spec: t.spec,
                status: None,
            }
        })
        .collect()
}

/// The ownerReferences a claim of `pod` should have under the set's
/// `persistentVolumeClaimRetentionPolicy` (upstream `updateClaimOwnerRefForSetAndPod`):
/// the set's with `whenDeleted: Delete` unless the pod is `scaled_down` under
/// `whenScaled: Delete`, which gives it the pod's instead. None when the claim already
/// has them, or when some other owner controls it (upstream leaves such a claim alone).
pub fn retained_claim_owners(
    set: &StatefulSet,
    pod: &Pod,
    claim: &PersistentVolumeClaim,
    scaled_down: bool,
) -> Option<Vec<OwnerReference>> {
    let policy = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let deletes = |p: Option<&String>| p.is_some_and(|p| p == "Delete");
    let when_deleted = deletes(policy.and_then(|p| p.when_deleted.as_ref()));
    let when_scaled = deletes(policy.and_then(|p| p.when_scaled.as_ref()));
    let (set_uid, pod_uid) = (set.metadata.uid.as_ref()?, pod.metadata.uid.as_ref()?);
    let refs = claim.metadata.owner_references.clone().unwrap_or_default();
    if refs
        .iter()
        .any(|r| r.controller == Some(true) && r.uid != *set_uid && r.uid != *pod_uid)
    {
        return None;
    }
    let by_pod = when_scaled && scaled_down;
    let by_set = when_deleted && !by_pod;
    let mut wanted: Vec<OwnerReference> = refs
        .iter()
        .filter(|r| (r.uid != *set_uid || by_set) && (r.uid != *pod_uid || by_pod))
        .cloned()
        .collect();
    for (want, uid, owner) in [
        (
            by_set,
            set_uid,
            plain_ref("apps/v1", "StatefulSet", &set.metadata),
        ),
        (by_pod, pod_uid, plain_ref("v1", "Pod", &pod.metadata)),
    ] {
        if want && !wanted.iter().any(|r| r.uid == *uid) {
            wanted.push(owner);
        }
    }
    (wanted != refs).then_some(wanted)
}

/// The pod of `ordinal` from `template` at `revision` (upstream `newStatefulSetPod` +
/// `setPodRevision`): identity, storage and controllerRef.
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, revision: &str, ordinal: i32) -> Pod {
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let name = format!("{set_name}-{ordinal}");
    let tm = template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = tm.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(REVISION_LABEL.into(), revision.into());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    spec.subdomain = set.spec.as_ref().and_then(|s| s.service_name.clone());
    // Claim volumes replace template volumes of the same name (upstream `updateStorage`).
    let templates = set
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.clone())
        .unwrap_or_default();
    let claim_names: Vec<String> = templates
        .iter()
        .map(|t| t.metadata.name.clone().unwrap_or_default())
        .collect();
    let mut volumes: Vec<Volume> = claims_for(set, ordinal)
        .into_iter()
        .zip(&claim_names)
        .map(|(c, vname)| Volume {
            name: vname.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: c.metadata.name.unwrap_or_default(),
                read_only: Some(false),
            }),
            ..Default::default()
        })
        .collect();
    volumes.extend(
        spec.volumes
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|v| !claim_names.contains(&v.name)),
    );
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![new_controller_ref(
                "apps/v1",
                "StatefulSet",
                &set_name,
                set.metadata.uid.as_deref().unwrap_or_default(),
            )]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Upstream `getPatch`: the revision data, the template replacing the set's.
pub fn revision_data(template: &PodTemplateSpec) -> Result<serde_json::Value> {
    let mut t = serde_json::to_value(template)?;
    if let Some(o) = t.as_object_mut() {
        o.insert("$patch".into(), json!("replace"));
    }
    Ok(json!({"spec": {"template": t}}))
}

/// The template stored in a revision's data.
pub fn template_of_revision(rev: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = rev.data.as_ref()?.0.get("spec")?.get("template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

/// Upstream `rand.SafeEncodeString`: digits mapped to characters that spell no words.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[b as usize % ALPHANUMS.len()] as char)
        .collect()
}

/// The revision hash of `data` with the collision count (upstream
/// `HashControllerRevision`: FNV-32a, the collision count as decimal appended).
pub fn revision_hash(data: &serde_json::Value, collision_count: Option<i32>) -> String {
    let mut h: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    feed(data.to_string().as_bytes());
    if let Some(c) = collision_count.filter(|c| *c != 0) {
        feed(c.to_string().as_bytes());
    }
    safe_encode(&h.to_string())
}

/// A pod's or claim's reference to an owner that does not control it.
fn plain_ref(api_version: &str, kind: &str, meta: &ObjectMeta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }
}

fn status_equal(a: &StatefulSetStatus, b: &StatefulSetStatus) -> bool {
    let z = |v: Option<i32>| v.unwrap_or(0);
    a.replicas == b.replicas
        && z(a.ready_replicas) == z(b.ready_replicas)
        && z(a.available_replicas) == z(b.available_replicas)
        && z(a.current_replicas) == z(b.current_replicas)
        && z(a.updated_replicas) == z(b.updated_replicas)
        && a.current_revision == b.current_revision
        && a.update_revision == b.update_revision
        && a.observed_generation == b.observed_generation
        && z(a.collision_count) == z(b.collision_count)
}

// ---------------------------------------------------------------------------------
// IO: the controller
// ---------------------------------------------------------------------------------

/// The StatefulSet controller.
pub struct StatefulSetController {
    client: kube::Client,
    sets: Store<StatefulSet>,
    pods: Store<Pod>,
    revisions: Store<ControllerRevision>,
    claims: Store<PersistentVolumeClaim>,
    events: Arc<dyn EventSink>,
}

impl StatefulSetController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(StatefulSetController {
            client,
            sets: factory.informer::<StatefulSet>().store(),
            pods: factory.informer::<Pod>().store(),
            revisions: factory.informer::<ControllerRevision>().store(),
            claims: factory.informer::<PersistentVolumeClaim>().store(),
            events,
        })
    }

    /// The key of the pod's controlling StatefulSet.
    fn owner_key(pod: &Pod) -> Option<String> {
        let r = controller_of(&pod.metadata)?;
        let ns = pod.metadata.namespace.as_deref()?;
        (r.kind == "StatefulSet" && r.api_version.starts_with("apps/"))
            .then(|| format!("{ns}/{}", r.name))
    }

    /// The update revision (created, or an equivalent one re-numbered) and the current
    /// one, as upstream `getStatefulSetRevisions`. Returns (current, update, collisions,
    /// all revisions of the set).
    async fn revisions(
        &self,
        set: &StatefulSet,
    ) -> Result<(
        ControllerRevision,
        ControllerRevision,
        Option<i32>,
        Vec<ControllerRevision>,
    )> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let uid = set.metadata.uid.as_deref().unwrap_or_default();
        let set_name = set.metadata.name.clone().unwrap_or_default();
        let api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), ns);
        let mut revs: Vec<ControllerRevision> = self
            .revisions
            .list_namespace(ns)
            .iter()
            .filter(|r| controller_of(&r.metadata).is_some_and(|o| o.uid == uid))
            .map(|r| (**r).clone())
            .collect();
        revs.sort_by_key(|r| r.revision);
        let spec = set.spec.clone().unwrap_or_default();
        let data = revision_data(&spec.template)?;
        let next = revs.last().map_or(0, |r| r.revision) + 1;
        let mut collisions = set.status.as_ref().and_then(|s| s.collision_count);
        let equivalent = revs.iter().rposition(|r| {
            r.data
                .as_ref()
                .is_some_and(|d| crate::util::same_revision_data(&d.0, &data))
        });
        let update = match equivalent {
            Some(i) if i + 1 == revs.len() => revs[i].clone(),
            Some(i) => {
                let mut r = revs[i].clone();
                r.revision = next;
                let name = r.metadata.name.clone().unwrap_or_default();
                let r = api.replace(&name, &PostParams::default(), &r).await?;
                revs[i] = r.clone();
                revs.sort_by_key(|r| r.revision);
                r
            }
            None => loop {
                let hash = revision_hash(&data, collisions);
                let mut labels = spec
                    .template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.clone())
                    .unwrap_or_default();
                labels.insert(HASH_LABEL.into(), hash.clone());
                let rev = ControllerRevision {
                    metadata: ObjectMeta {
                        name: Some(format!("{set_name}-{hash}")),
                        namespace: Some(ns.into()),
                        labels: Some(labels),
                        owner_references: Some(vec![new_controller_ref(
                            "apps/v1",
                            "StatefulSet",
                            &set_name,
                            uid,
                        )]),
                        ..Default::default()
                    },
                    data: Some(RawExtension(data.clone())),
                    revision: next,
                };
                match api.create(&PostParams::default(), &rev).await {
                    Ok(r) => {
                        revs.push(r.clone());
                        break r;
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        let name = rev.metadata.name.clone().unwrap_or_default();
                        let existing = api.get(&name).await?;
                        let ours = controller_of(&existing.metadata).is_some_and(|o| o.uid == uid);
                        if ours && existing.data.as_ref().is_some_and(|d| d.0 == data) {
                            // The cache had not seen our own earlier create.
                            if !revs
                                .iter()
                                .any(|r| r.metadata.name == existing.metadata.name)
                            {
                                revs.push(existing.clone());
                            }
                            break existing;
                        }
                        // A real hash collision: the count changes the next name.
                        let c = collisions.unwrap_or(0);
                        if c >= 10 {
                            return Err(Error::Invalid(format!(
                                "revision name {name} collides {c} times"
                            )));
                        }
                        collisions = Some(c + 1);
                    }
                    Err(e) => return Err(e.into()),
                }
            },
        };
        let current_name = set.status.as_ref().and_then(|s| s.current_revision.clone());
        let current = revs
            .iter()
            .find(|r| current_name.is_some() && r.metadata.name == current_name)
            .cloned()
            .unwrap_or_else(|| update.clone());
        Ok((current, update, collisions, revs))
    }

    /// One write of a sync's plan.
    async fn run_step(
        &self,
        set: &StatefulSet,
        step: &Step,
        owned: &[&Pod],
        current: &ControllerRevision,
        update_name: &str,
    ) -> Result<StepDone> {
        let by_name = |n: &str| owned.iter().copied().find(|p| pod_name(p) == n);
        let mut done = StepDone::default();
        match step {
            Step::Create(ord, rev) => {
                let (template, revision) = match rev {
                    Rev::Current => (
                        template_of_revision(current)
                            .unwrap_or_else(|| set.spec.clone().unwrap_or_default().template),
                        current.metadata.name.as_deref().unwrap_or_default(),
                    ),
                    Rev::Update => (set.spec.clone().unwrap_or_default().template, update_name),
                };
                done.stale_claims = self
                    .create_pod(set, &new_pod(set, &template, revision, *ord))
                    .await?;
            }
            Step::DeleteFinished(n) | Step::Condemn(n) => {
                if let Some(p) = by_name(n) {
                    self.delete_pod(set, p).await?;
                }
            }
            Step::CreateMissingClaims(n) => {
                if let Some(p) = by_name(n) {
                    self.create_claims(set, ordinal_of(p), n).await?;
                }
            }
            Step::FixIdentity(n) => {
                if let Some(p) = by_name(n) {
                    self.fix_identity(set, p).await?;
                }
            }
            Step::Roll(n) => {
                if let Some(p) = by_name(n) {
                    self.delete_pod(set, p).await?;
                    done.rolled_current = Some(revision_of(p)) == current.metadata.name.as_deref();
                }
            }
        }
        Ok(done)
    }

    /// Creates the claims of `pod` that do not exist yet (upstream
    /// `createPersistentVolumeClaims`). True when an existing claim is stale: being
    /// deleted, or still owned by an earlier pod of that name (upstream
    /// `PodClaimIsStale`), so the garbage collector is about to remove it.
    async fn create_claims(&self, set: &StatefulSet, ordinal: i32, pod: &str) -> Result<bool> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        let when_deleted = set
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref())
            .and_then(|p| p.when_deleted.as_deref())
            == Some("Delete");
        let mut stale = false;
        for mut claim in claims_for(set, ordinal) {
            let cname = claim.metadata.name.clone().unwrap_or_default();
            // From the informer, as upstream's lister: a claim made since is a 409 below.
            if let Some(existing) = self.claims.get_by_name(Some(ns), &cname) {
                let m = &existing.metadata;
                stale |= m.deletion_timestamp.is_some()
                    || m.owner_references.iter().flatten().any(|r| r.kind == "Pod");
                continue;
            }
            if when_deleted {
                claim.metadata.owner_references =
                    Some(vec![plain_ref("apps/v1", "StatefulSet", &set.metadata)]);
            }
            match api.create(&PostParams::default(), &claim).await {
                Ok(_) => emit(
                    &*self.events,
                    set,
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("create Claim {cname} Pod {pod} in StatefulSet {set_name} success"),
                ),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    emit(
                        &*self.events,
                        set,
                        EventType::Warning,
                        "FailedCreate",
                        format!(
                            "create Claim {cname} for Pod {pod} in StatefulSet {set_name} failed error: {}",
                            error_message(&e)
                        ),
                    );
                    return Err(e.into());
                }
            }
        }
        Ok(stale)
    }

    /// Brings the ownerReferences of `pod`'s claims in line with the set's retention
    /// policy (upstream `UpdatePodClaimForRetentionPolicy`), reading the claims from
    /// the informer; a missing claim is left to the next sync.
    async fn retain_claims(&self, set: &StatefulSet, pod: &Pod, scaled_down: bool) -> Result<()> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        for template in claims_for(set, ordinal_of(pod)) {
            let cname = template.metadata.name.clone().unwrap_or_default();
            let Some(claim) = self.claims.get_by_name(Some(ns), &cname) else {
                continue;
            };
            let Some(owners) = retained_claim_owners(set, pod, &claim, scaled_down) else {
                continue;
            };
            let mut updated = (*claim).clone();
            updated.metadata.owner_references = Some(owners);
            // A stale informer copy is a conflict: the sync fails and is retried, as
            // claims are not watched.
            match api.replace(&cname, &PostParams::default(), &updated).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn delete_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<()> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let name = pod_name(pod);
        // The uid precondition keeps a stale cache from deleting the pod's replacement.
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => {
                emit(
                    &*self.events,
                    set,
                    EventType::Normal,
                    "SuccessfulDelete",
                    format!("delete Pod {name} in StatefulSet {set_name} successful"),
                );
                Ok(())
            }
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(e) => {
                emit(
                    &*self.events,
                    set,
                    EventType::Warning,
                    "FailedDelete",
                    format!(
                        "delete Pod {name} in StatefulSet {set_name} failed error: {}",
                        error_message(&e)
                    ),
                );
                Err(e.into())
            }
        }
    }

    /// Creates the pod after its claims; true when it waits for a stale claim to go.
    async fn create_pod(&self, set: &StatefulSet, pod: &Pod) -> Result<bool> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let set_name = set.metadata.name.as_deref().unwrap_or_default();
        let name = pod_name(pod).to_string();
        if self.create_claims(set, ordinal_of(pod), &name).await? {
            return Ok(true);
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        match api.create(&PostParams::default(), pod).await {
            Ok(_) => {
                emit(
                    &*self.events,
                    set,
                    EventType::Normal,
                    "SuccessfulCreate",
                    format!("create Pod {name} in StatefulSet {set_name} successful"),
                );
                Ok(false)
            }
            // Our cache had not seen the pod yet (or it is still being removed): its
            // event brings us back.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => {
                emit(
                    &*self.events,
                    set,
                    EventType::Warning,
                    "FailedCreate",
                    format!(
                        "create Pod {name} in StatefulSet {set_name} failed error: {}",
                        error_message(&e)
                    ),
                );
                Err(e.into())
            }
        }
    }

    async fn fix_identity(&self, set: &StatefulSet, pod: &Pod) -> Result<()> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let mut p = pod.clone();
        let name = pod_name(pod).to_string();
        let labels = p.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(POD_NAME_LABEL.into(), name.clone());
        labels.insert(POD_INDEX_LABEL.into(), ordinal_of(pod).to_string());
        match api.replace(&name, &PostParams::default(), &p).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the oldest revisions beyond `revisionHistoryLimit` that no pod uses and
    /// that are neither current nor update (upstream `truncateHistory`).
    async fn truncate_history(
        &self,
        set: &StatefulSet,
        pods: &[&Pod],
        revs: &[ControllerRevision],
        live: &[&str],
    ) -> Result<()> {
        let limit = set
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10)
            .max(0) as usize;
        let history: Vec<&ControllerRevision> = revs
            .iter()
            .filter(|r| {
                let n = r.metadata.name.as_deref().unwrap_or_default();
                !live.contains(&n) && !pods.iter().any(|p| revision_of(p) == n)
            })
            .collect();
        if history.len() <= limit {
            return Ok(());
        }
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), ns);
        for r in &history[..history.len() - limit] {
            let n = r.metadata.name.as_deref().unwrap_or_default();
            match api.delete(n, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The set's pods: owned ones that still match, orphans that match adopted,
    /// owned ones that no longer match released (upstream `getPodsForStatefulSet`).
    async fn claim_pods(&self, set: &StatefulSet) -> Result<Vec<Arc<Pod>>> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let name = set.metadata.name.as_deref().unwrap_or_default();
        let uid = set.metadata.uid.as_deref().unwrap_or_default();
        let owner = ClaimingOwner {
            api_version: "apps/v1",
            kind: "StatefulSet",
            namespace: ns,
            name,
            uid,
            deleting: set.metadata.deletion_timestamp.is_some(),
            adopt_finalizers: &[],
        };
        claim_pods::<StatefulSet>(&self.client, owner, self.pods.list_namespace(ns), |p| {
            may_claim(set, p)
        })
        .await
    }

    async fn write_status(&self, set: &StatefulSet, status: &StatefulSetStatus) -> Result<()> {
        let ns = set.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<StatefulSet> = Api::namespaced(self.client.clone(), ns);
        // The conditions are the copy's own: this controller sets none.
        replace_status_retrying(&api, set, |obj| {
            let conditions = obj.status.as_ref().and_then(|s| s.conditions.clone());
            obj.status = Some(StatefulSetStatus {
                conditions,
                ..status.clone()
            });
        })
        .await
    }
}

#[async_trait::async_trait]
impl Controller for StatefulSetController {
    fn name(&self) -> &'static str {
        "statefulset"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory.informer::<StatefulSet>().add_event_handler(
            move |n: Notification<StatefulSet>| {
                if !matches!(n, Notification::Deleted { .. }) {
                    q.add(object_key(&**n.object()));
                }
            },
            None,
        );
        // minReadySeconds needs no timer here: a sync with a ready but not yet available
        // pod requeues itself for the moment it becomes available.
        let q = queue.clone();
        let sets = self.sets.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| {
                let enqueue = |p: &Pod| {
                    if let Some(k) = Self::owner_key(p) {
                        q.add(k);
                    } else if controller_of(&p.metadata).is_none() && !is_terminating(p) {
                        // An orphan: the sets that may adopt it (upstream
                        // `getStatefulSetsForPod`).
                        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
                        for s in sets.list_namespace(ns) {
                            if may_claim(&s, p) {
                                q.add(object_key(&*s));
                            }
                        }
                    }
                };
                match n {
                    Notification::Updated { old, new } => {
                        if old.metadata.resource_version == new.metadata.resource_version {
                            return;
                        }
                        if controller_of(&old.metadata).map(|r| &r.uid)
                            != controller_of(&new.metadata).map(|r| &r.uid)
                        {
                            enqueue(&old);
                        }
                        enqueue(&new);
                    }
                    n => enqueue(n.object()),
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, _) = split_key(key);
        if ns.is_none() {
            return Err(Error::Invalid(format!("key {key:?} has no namespace")));
        }
        let Some(set) = self.sets.get(key) else {
            return Ok(Action::Done);
        };
        let set = (*set).clone();
        let params = SetParams::of(&set);
        let claimed = self.claim_pods(&set).await?;
        let owned: Vec<&Pod> = claimed.iter().map(|p| &**p).collect();

        let (current, update, collisions, revs) = self.revisions(&set).await?;
        let current_name = current.metadata.name.clone().unwrap_or_default();
        let update_name = update.metadata.name.clone().unwrap_or_default();
        let now = Timestamp::now();
        let mut status = compute_status(
            &params,
            &owned,
            &current_name,
            &update_name,
            set.metadata.generation,
            collisions,
            now,
        );
        let steps = plan(&params, &owned, &update_name, now);
        let mut errors: Vec<Error> = Vec::new();
        // Claims follow the retention policy first, so that a condemned pod's claims
        // are its own before the pod is deleted.
        if !params.deleting {
            let in_range = params.start..params.start.saturating_add(params.replicas);
            for pod in owned.iter().filter(|p| !is_terminating(p)) {
                let scaled_down = !in_range.contains(&ordinal_of(pod));
                if let Err(e) = self.retain_claims(&set, pod, scaled_down).await {
                    errors.push(e);
                }
            }
        }
        let mut done = Vec::with_capacity(steps.len());
        if params.ordered {
            for step in &steps {
                match self
                    .run_step(&set, step, &owned, &current, &update_name)
                    .await
                {
                    Ok(d) => done.push(d),
                    Err(e) => {
                        // OrderedReady makes no further progress past a failed write.
                        errors.push(e);
                        break;
                    }
                }
            }
        } else {
            // Parallel: upstream's runForAll, slow-start batches (1, 2, 4, ...) that stop
            // after a batch with a failure.
            let next = parking_lot::Mutex::new(steps.iter());
            let finished = parking_lot::Mutex::new(Vec::with_capacity(steps.len()));
            let (_, err) = slow_start_batch(steps.len(), SLOW_START_INITIAL_BATCH, || async {
                let Some(step) = next.lock().next() else {
                    return Ok(());
                };
                let d = self
                    .run_step(&set, step, &owned, &current, &update_name)
                    .await?;
                finished.lock().push(d);
                Ok::<(), Error>(())
            })
            .await;
            done = finished.into_inner();
            errors.extend(err);
        }
        let stale_claims = done.iter().any(|d| d.stale_claims);
        let rolled_current = done.iter().filter(|d| d.rolled_current).count();
        if rolled_current > 0 {
            status.current_replicas =
                Some(status.current_replicas.unwrap_or(0) - rolled_current as i32);
        }

        let old = set.status.clone().unwrap_or_default();
        if !status_equal(&status, &old) {
            self.write_status(&set, &status).await?;
        }
        let live = [current_name.as_str(), update_name.as_str()];
        self.truncate_history(&set, &owned, &revs, &live).await?;

        if let Some(first) = errors.into_iter().next() {
            return Err(first);
        }
        let wait = owned
            .iter()
            .filter_map(|p| seconds_until_available(p, params.min_ready_seconds, now))
            .min();
        let available = match wait {
            Some(s) => Action::RequeueAfter(Duration::from_secs(s as u64 + 1)),
            None => Action::Done,
        };
        // Claims are not watched: poll until the garbage collector removed a stale one.
        Ok(if stale_claims {
            available.min(Action::RequeueAfter(STALE_CLAIM_POLL))
        } else {
            available
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    const NOW: i64 = 10_000;

    /// A pod of set `web`: `state` is `ready`, `unready`, `pending`, `failed`,
    /// `terminating` or `fresh` (ready 1 s ago).
    fn pod(ord: i32, rev: &str, state: &str) -> Pod {
        let name = format!("web-{ord}");
        let (phase, ready, since) = match state {
            "ready" | "terminating" => ("Running", true, NOW - 100),
            "fresh" => ("Running", true, NOW - 1),
            "unready" => ("Running", false, NOW - 100),
            "pending" => ("Pending", false, NOW - 100),
            "failed" => ("Failed", false, NOW - 100),
            other => panic!("{other}"),
        };
        Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(
                    [
                        (POD_NAME_LABEL.to_string(), name),
                        (POD_INDEX_LABEL.to_string(), ord.to_string()),
                        (REVISION_LABEL.to_string(), rev.to_string()),
                    ]
                    .into(),
                ),
                deletion_timestamp: (state == "terminating").then(|| Time(ts(NOW))),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    last_transition_time: Some(Time(ts(since))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn params(replicas: i32, ordered: bool, partition: Option<i32>) -> SetParams {
        SetParams {
            name: "web".into(),
            start: 0,
            replicas,
            ordered,
            rolling_partition: partition,
            min_ready_seconds: 0,
            deleting: false,
        }
    }

    fn c(o: i32) -> Step {
        Step::Create(o, Rev::Update)
    }
    fn s(f: fn(String) -> Step, n: &str) -> Step {
        f(n.to_string())
    }

    #[test]
    fn ordinals_parse_like_upstream() {
        let cases = [
            ("web-0", Some(("web", 0))),
            ("my-web-12", Some(("my-web", 12))),
            ("web-", None),
            ("web", None),
            ("web-1a", None),
        ];
        for (name, want) in cases {
            assert_eq!(parent_and_ordinal(name), want, "{name}");
        }
    }

    #[test]
    fn plan_per_policy_and_strategy() {
        let u = "web-u";
        let o = "web-o";
        let cases: Vec<(&str, SetParams, Vec<Pod>, Vec<Step>)> = vec![
            (
                "ordered: first pod",
                params(3, true, Some(0)),
                vec![],
                vec![c(0)],
            ),
            (
                "ordered: waits for an unready predecessor",
                params(3, true, Some(0)),
                vec![pod(0, u, "unready")],
                vec![],
            ),
            (
                "ordered: waits for a pending predecessor (claims checked)",
                params(3, true, Some(0)),
                vec![pod(0, u, "pending")],
                vec![s(Step::CreateMissingClaims, "web-0")],
            ),
            (
                "ordered: next after a ready one",
                params(3, true, Some(0)),
                vec![pod(0, u, "ready")],
                vec![c(1)],
            ),
            (
                "ordered: minReadySeconds holds the next",
                SetParams {
                    min_ready_seconds: 10,
                    ..params(3, true, Some(0))
                },
                vec![pod(0, u, "fresh")],
                vec![],
            ),
            (
                "parallel: all missing at once",
                params(3, false, Some(0)),
                vec![pod(1, u, "unready")],
                vec![c(0), c(2)],
            ),
            (
                "failed pod deleted, ordered stops there",
                params(3, true, Some(0)),
                vec![pod(0, u, "failed"), pod(1, u, "ready")],
                vec![s(Step::DeleteFinished, "web-0")],
            ),
            (
                "ordered scale-down: highest first, one at a time",
                params(1, true, Some(0)),
                vec![pod(0, u, "ready"), pod(1, u, "ready"), pod(2, u, "ready")],
                vec![s(Step::Condemn, "web-2")],
            ),
            (
                "ordered scale-down waits for a terminating one",
                params(1, true, Some(0)),
                vec![
                    pod(0, u, "ready"),
                    pod(1, u, "ready"),
                    pod(2, u, "terminating"),
                ],
                vec![],
            ),
            (
                "ordered scale-down blocked by an unhealthy replica",
                params(1, true, Some(0)),
                vec![pod(0, u, "unready"), pod(1, u, "ready")],
                vec![],
            ),
            (
                "ordered scale-down: the first unhealthy condemned may go",
                params(1, true, Some(0)),
                vec![pod(0, u, "ready"), pod(1, u, "unready")],
                vec![s(Step::Condemn, "web-1")],
            ),
            (
                "parallel scale-down: all at once",
                params(1, false, Some(0)),
                vec![pod(0, u, "ready"), pod(1, u, "unready"), pod(2, u, "ready")],
                vec![s(Step::Condemn, "web-2"), s(Step::Condemn, "web-1")],
            ),
            (
                "rolling: highest old pod first",
                params(3, true, Some(0)),
                vec![pod(0, o, "ready"), pod(1, o, "ready"), pod(2, o, "ready")],
                vec![s(Step::Roll, "web-2")],
            ),
            (
                "rolling: waits for the replacement",
                params(3, false, Some(0)),
                vec![pod(0, o, "ready"), pod(1, o, "ready"), pod(2, u, "unready")],
                vec![],
            ),
            (
                "rolling: next one down once healthy",
                params(3, true, Some(0)),
                vec![pod(0, o, "ready"), pod(1, o, "ready"), pod(2, u, "ready")],
                vec![s(Step::Roll, "web-1")],
            ),
            (
                "rolling: partition keeps lower ordinals",
                params(3, true, Some(2)),
                vec![pod(0, o, "ready"), pod(1, o, "ready"), pod(2, u, "ready")],
                vec![],
            ),
            (
                "on delete: never rolls",
                params(2, true, None),
                vec![pod(0, o, "ready"), pod(1, o, "ready")],
                vec![],
            ),
            (
                "scaling takes precedence over updates",
                params(1, true, Some(0)),
                vec![pod(0, o, "ready"), pod(1, o, "ready")],
                vec![s(Step::Condemn, "web-1")],
            ),
            (
                "deleting set: nothing",
                SetParams {
                    deleting: true,
                    ..params(3, true, Some(0))
                },
                vec![],
                vec![],
            ),
        ];
        for (what, p, pods, want) in cases {
            let refs: Vec<&Pod> = pods.iter().collect();
            assert_eq!(plan(&p, &refs, u, ts(NOW)), want, "{what}");
        }
    }

    #[test]
    fn identity_is_repaired_and_start_ordinal_honoured() {
        let mut p0 = pod(0, "r", "ready");
        p0.metadata.labels.as_mut().unwrap().remove(POD_INDEX_LABEL);
        let refs = [&p0];
        assert_eq!(
            plan(&params(1, true, Some(0)), &refs, "r", ts(NOW)),
            vec![s(Step::FixIdentity, "web-0")]
        );
        let p = SetParams {
            start: 5,
            ..params(2, true, Some(0))
        };
        let p0 = pod(0, "r", "ready");
        let refs = [&p0];
        // web-0 is outside [5, 7): created first is web-5; web-0 waits (ordered).
        assert_eq!(plan(&p, &refs, "r", ts(NOW)), vec![c(5)]);
    }

    #[test]
    fn new_pods_below_the_partition_use_the_current_revision() {
        let p = params(3, true, Some(2));
        assert_eq!(revision_for(&p, 1), Rev::Current);
        assert_eq!(revision_for(&p, 2), Rev::Update);
        assert_eq!(revision_for(&params(3, true, None), 0), Rev::Update);
    }

    #[test]
    fn status_counts_and_rollout_completion() {
        let p = SetParams {
            min_ready_seconds: 10,
            ..params(3, true, Some(0))
        };
        let pods = [
            pod(0, "old", "ready"),
            pod(1, "new", "fresh"),
            pod(2, "new", "terminating"),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let st = compute_status(&p, &refs, "old", "new", Some(4), None, ts(NOW));
        assert_eq!(st.replicas, 3);
        assert_eq!(st.ready_replicas, Some(3));
        assert_eq!(st.available_replicas, Some(2));
        assert_eq!(st.current_replicas, Some(1));
        assert_eq!(st.updated_replicas, Some(1));
        assert_eq!(st.current_revision.as_deref(), Some("old"));
        assert_eq!(st.observed_generation, Some(4));

        let pods = [pod(0, "new", "ready"), pod(1, "new", "ready")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let st = compute_status(&p, &refs, "old", "new", Some(4), None, ts(NOW));
        assert_eq!(st.current_revision.as_deref(), Some("new"));
        assert_eq!(st.current_replicas, Some(2));
        // OnDelete never moves the current revision here.
        let st = compute_status(
            &params(2, true, None),
            &refs,
            "old",
            "new",
            None,
            None,
            ts(NOW),
        );
        assert_eq!(st.current_revision.as_deref(), Some("old"));
    }

    fn set() -> StatefulSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid"},
            "spec": {
                "serviceName": "svc",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}],
                             "volumes": [{"name": "data", "emptyDir": {}},
                                         {"name": "cfg", "emptyDir": {}}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": {"t": "x"}},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Gi"}}}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn pods_and_claims_carry_the_identity() {
        let s = set();
        let t = s.spec.clone().unwrap().template;
        let p = new_pod(&s, &t, "web-abc", 2);
        assert_eq!(p.metadata.name.as_deref(), Some("web-2"));
        let l = p.metadata.labels.clone().unwrap();
        assert_eq!(l[POD_NAME_LABEL], "web-2");
        assert_eq!(l[POD_INDEX_LABEL], "2");
        assert_eq!(l[REVISION_LABEL], "web-abc");
        assert_eq!(l["app"], "web");
        let spec = p.spec.clone().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("web-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("svc"));
        let vols = spec.volumes.unwrap();
        assert_eq!(vols.len(), 2, "the template's data volume is replaced");
        assert_eq!(
            vols[0].persistent_volume_claim.as_ref().unwrap().claim_name,
            "data-web-2"
        );
        assert_eq!(vols[1].name, "cfg");
        let r = &p.metadata.owner_references.unwrap()[0];
        assert_eq!((r.kind.as_str(), r.controller), ("StatefulSet", Some(true)));
        assert!(identity_matches("web", &pod(2, "x", "ready")));

        let claims = claims_for(&s, 2);
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].metadata.name.as_deref(), Some("data-web-2"));
        let cl = claims[0].metadata.labels.clone().unwrap();
        assert_eq!((cl["t"].as_str(), cl["app"].as_str()), ("x", "web"));
    }

    #[test]
    fn claim_owners_follow_the_retention_policy() {
        let mut set = set();
        set.metadata.uid = Some("set-uid".into());
        let mut pod = new_pod(&set, &set.spec.clone().unwrap().template, "r", 1);
        pod.metadata.uid = Some("pod-uid".into());
        let claim = |owners: &[&str]| {
            let mut c = claims_for(&set, 1).remove(0);
            c.metadata.owner_references = Some(
                owners
                    .iter()
                    .map(|o| match *o {
                        "set" => plain_ref("apps/v1", "StatefulSet", &set.metadata),
                        _ => plain_ref("v1", "Pod", &pod.metadata),
                    })
                    .collect(),
            );
            c
        };
        let uids = |refs: Option<Vec<OwnerReference>>| {
            refs.map(|r| r.into_iter().map(|r| r.uid).collect::<Vec<_>>())
        };
        let with_policy = |scaled: &str, deleted: &str| {
            let mut s = set.clone();
            s.spec
                .as_mut()
                .unwrap()
                .persistent_volume_claim_retention_policy = Some(
                k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_scaled: Some(scaled.into()),
                    when_deleted: Some(deleted.into()),
                },
            );
            s
        };
        let (rr, rd) = (
            with_policy("Retain", "Retain"),
            with_policy("Retain", "Delete"),
        );
        let (dr, dd) = (
            with_policy("Delete", "Retain"),
            with_policy("Delete", "Delete"),
        );
        // (set, claim's owners, scaled down) -> the owners it should get, None if right.
        type Case<'a> = (&'a StatefulSet, &'a [&'a str], bool, Option<Vec<&'a str>>);
        let cases: [Case<'_>; 9] = [
            (&rr, &["set", "pod"], false, Some(vec![])),
            (&rr, &[], true, None),
            (&rd, &[], false, Some(vec!["set-uid"])),
            (&rd, &["set", "pod"], true, Some(vec!["set-uid"])),
            (&dr, &["set"], true, Some(vec!["pod-uid"])),
            (&dr, &["pod"], false, Some(vec![])),
            (&dd, &["set"], true, Some(vec!["pod-uid"])),
            // Scaled back up before the pod went: the set's again.
            (&dd, &["pod"], false, Some(vec!["set-uid"])),
            (&dd, &["set"], false, None),
        ];
        for (s, owners, scaled_down, want) in cases {
            let want = want.map(|w| w.into_iter().map(String::from).collect());
            let got = uids(retained_claim_owners(s, &pod, &claim(owners), scaled_down));
            assert_eq!(got, want, "{owners:?} scaled down {scaled_down}");
        }
        // Another controller's claim is left alone.
        let mut foreign = claim(&[]);
        foreign.metadata.owner_references = Some(vec![OwnerReference {
            controller: Some(true),
            uid: "other".into(),
            ..Default::default()
        }]);
        assert_eq!(retained_claim_owners(&dd, &pod, &foreign, true), None);
    }

    #[test]
    fn claims_need_selector_and_name() {
        let s = set();
        let mut p = pod(1, "r", "ready");
        p.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("app".into(), "web".into());
        assert!(may_claim(&s, &p));
        let mut other = p.clone();
        other.metadata.name = Some("db-1".into());
        assert!(!may_claim(&s, &other), "another set's name");
        let mut unlabelled = p.clone();
        unlabelled.metadata.labels.as_mut().unwrap().remove("app");
        assert!(!may_claim(&s, &unlabelled), "selector does not match");
        let mut empty = s.clone();
        empty.spec.as_mut().unwrap().selector = Default::default();
        assert!(!may_claim(&empty, &p), "an empty selector selects nothing");
    }

    #[test]
    fn revisions_hash_and_round_trip() {
        let t = set().spec.unwrap().template;
        let d = revision_data(&t).unwrap();
        assert_eq!(d["spec"]["template"]["$patch"], "replace");
        let h = revision_hash(&d, None);
        assert_eq!(h, revision_hash(&d, Some(0)), "count 0 is no count");
        assert_ne!(h, revision_hash(&d, Some(1)));
        assert!(
            h.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
        let mut t2 = t.clone();
        t2.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
        assert_ne!(h, revision_hash(&revision_data(&t2).unwrap(), None));
        let rev = ControllerRevision {
            data: Some(RawExtension(d)),
            ..Default::default()
        };
        assert_eq!(template_of_revision(&rev), Some(t));
    }
}
