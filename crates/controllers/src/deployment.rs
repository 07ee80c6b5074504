//! The Deployment controller (upstream `pkg/controller/deployment` and
//! `deployment/util`).
//!
//! Pure part (`plan`-style functions, time passed in): [`compute_hash`], new/old
//! ReplicaSet finding ([`find_new_rs`], [`equal_ignore_hash`]), fenceposts
//! ([`max_surge`], [`max_unavailable`]), the RollingUpdate steps
//! ([`new_rs_new_replicas`], [`plan_old_scale_down`]), proportional scaling
//! ([`plan_proportional_scale`]), revisions ([`set_new_rs_annotations`]),
//! history cleanup ([`plan_cleanup`]), status and conditions ([`calculate_status`],
//! [`rollout_conditions`]). IO part: [`DeploymentController`].

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec,
};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use ferrokube_client::error_message;
use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::replicaset::{Claim, claim_decision, is_not_found};
use crate::util::{
    controller_of, created_secs, labels, new_controller_ref, scaled_value, selector_is_empty,
    selector_matches,
};
use crate::{Action, Controller, Error, Result, omitempty, split_key};

pub const DEFAULT_UNIQUE_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
const DEPRECATED_ROLLBACK_TO: &str = "deprecated.deployment.rollback.to";
/// Upstream's `maxRevHistoryLengthInChars`.
pub const MAX_REV_HISTORY_CHARS: usize = 2000;

// Condition reasons (upstream deployment/util).
pub const NEW_RS_REASON: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS_REASON: &str = "FoundNewReplicaSet";
pub const RS_UPDATED_REASON: &str = "ReplicaSetUpdated";
pub const NEW_RS_AVAILABLE_REASON: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";
pub const PAUSED_REASON: &str = "DeploymentPaused";
pub const RESUMED_REASON: &str = "DeploymentResumed";
pub const FAILED_RS_CREATE_REASON: &str = "ReplicaSetCreateError";
pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

// ---------------------------------------------------------------------------------
// Accessors
// ---------------------------------------------------------------------------------

fn dspec(d: &Deployment) -> &k8s_openapi::api::apps::v1::DeploymentSpec {
    static EMPTY: std::sync::OnceLock<k8s_openapi::api::apps::v1::DeploymentSpec> =
        std::sync::OnceLock::new();
    d.spec
        .as_ref()
        .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
}

/// `spec.replicas` (default 1).
pub fn d_replicas(d: &Deployment) -> i32 {
    dspec(d).replicas.unwrap_or(1)
}

/// Whether the strategy is RollingUpdate (the default).
pub fn is_rolling(d: &Deployment) -> bool {
    dspec(d)
        .strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .is_none_or(|t| t == "RollingUpdate")
}

fn rolling_params(
    d: &Deployment,
) -> (
    Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let ru = dspec(d)
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref());
    let default = || Some(IntOrString::String("25%".into()));
    (
        ru.map_or_else(default, |r| r.max_surge.clone().or_else(default)),
        ru.map_or_else(default, |r| r.max_unavailable.clone().or_else(default)),
    )
}

/// `progressDeadlineSeconds` (default 600; `i32::MAX` means none).
pub fn progress_deadline(d: &Deployment) -> Option<i32> {
    let p = dspec(d).progress_deadline_seconds.unwrap_or(600);
    (p != i32::MAX).then_some(p)
}

fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}
fn rs_status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)
}
fn rs_available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}
fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}
fn rs_name(rs: &ReplicaSet) -> &str {
    rs.metadata.name.as_deref().unwrap_or_default()
}
fn annotation<'a>(meta: &'a ObjectMeta, k: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(k).map(String::as_str)
}

/// The revision of a ReplicaSet (0 when unset or malformed).
pub fn revision(rs: &ReplicaSet) -> i64 {
    annotation(&rs.metadata, REVISION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Upstream `MaxRevision`.
pub fn max_revision<'a>(rss: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    rss.into_iter().map(revision).max().unwrap_or(0)
}

// ---------------------------------------------------------------------------------
// Hashing and ReplicaSet finding
// ---------------------------------------------------------------------------------

/// Upstream `rand.SafeEncodeString`: maps each byte onto a vowel-free alphabet.
pub fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[(b as usize) % ALPHANUMS.len()] as char)
        .collect()
}

/// FNV-1a, 32 bit (Go's `hash/fnv` New32a).
pub fn fnv32a(data: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for chunk in data {
        for b in *chunk {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// Upstream `controller.ComputeHash`: FNV-32a of the template, then of the collision
/// count as 4 little-endian bytes, printed in decimal and safe-encoded. The template
/// is hashed as its canonical JSON (upstream hashes Go's spew dump of the struct,
/// which no other language reproduces; only stability within a cluster matters since
/// ReplicaSets are matched by template equality, not by hash).
pub fn compute_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let json = serde_json::to_vec(template).unwrap_or_default();
    let h = match collision_count {
        Some(c) => fnv32a(&[&json, &(c as u32).to_le_bytes()]),
        None => fnv32a(&[&json]),
    };
    safe_encode(&h.to_string())
}

fn strip_hash(t: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = t.clone();
    if let Some(m) = t.metadata.as_mut()
        && let Some(l) = m.labels.as_mut()
    {
        l.remove(DEFAULT_UNIQUE_LABEL);
        if l.is_empty() {
            m.labels = None;
        }
    }
    t
}

/// Upstream `EqualIgnoreHash`: templates equal except for the pod-template-hash label,
/// compared as Go compares the structs, in which an unset non-pointer struct is its
/// zero value (a container without `resources` and one with `resources: {}` are
/// equal). A template stored before the apiserver wrote those zero values still
/// matches its ReplicaSet's once it has them, so no rollout follows.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let go_form = |t: &PodTemplateSpec| {
        let mut v = serde_json::to_value(strip_hash(t)).ok()?;
        crate::util::to_template_go_form(&mut v);
        Some(v)
    };
    go_form(a) == go_form(b)
}

fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    created_secs(&a.metadata)
        .cmp(&created_secs(&b.metadata))
        .then_with(|| rs_name(a).cmp(rs_name(b)))
}

/// Upstream `FindNewReplicaSet`: the oldest ReplicaSet whose template equals the
/// Deployment's (ignoring the hash label).
pub fn find_new_rs<'a>(d: &Deployment, rss: &'a [ReplicaSet]) -> Option<&'a ReplicaSet> {
    let mut sorted: Vec<&ReplicaSet> = rss.iter().collect();
    sorted.sort_by(|a, b| by_creation(a, b));
    sorted.into_iter().find(|rs| {
        rs.spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .is_some_and(|t| equal_ignore_hash(t, &dspec(d).template))
    })
}

// ---------------------------------------------------------------------------------
// Fenceposts and rolling steps
// ---------------------------------------------------------------------------------

/// Upstream `ResolveFenceposts`: surge rounds up, unavailable rounds down; both zero
/// resolves unavailable to 1.
pub fn resolve_fenceposts(d: &Deployment) -> (i32, i32) {
    let (s, u) = rolling_params(d);
    let desired = d_replicas(d);
    let surge = scaled_value(s.as_ref(), desired, true).unwrap_or(0);
    let mut unavailable = scaled_value(u.as_ref(), desired, false).unwrap_or(0);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// Upstream `MaxSurge` (0 for Recreate).
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) {
        return 0;
    }
    resolve_fenceposts(d).0
}

/// Upstream `MaxUnavailable` (0 for Recreate or 0 replicas; at most replicas).
pub fn max_unavailable(d: &Deployment) -> i32 {
    let r = d_replicas(d);
    if !is_rolling(d) || r == 0 {
        return 0;
    }
    resolve_fenceposts(d).1.min(r)
}

/// Upstream `NewRSNewReplicas`: how far the new ReplicaSet may grow now.
pub fn new_rs_new_replicas(d: &Deployment, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> i32 {
    let desired = d_replicas(d);
    if !is_rolling(d) {
        return desired;
    }
    let current: i32 = all.iter().map(|r| rs_replicas(r)).sum();
    let max_total = desired + max_surge(d);
    if current >= max_total {
        return rs_replicas(new_rs);
    }
    let up = (max_total - current).min(desired - rs_replicas(new_rs));
    rs_replicas(new_rs) + up
}

/// A ReplicaSet size change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scale {
    pub name: String,
    pub from: i32,
    pub to: i32,
}

/// Upstream `reconcileOldReplicaSets` (cleanupUnhealthyReplicas, then
/// scaleDownOldReplicaSetsForRollingUpdate) as a plan. `old` are the active old
/// ReplicaSets. Scales of the same ReplicaSet are merged.
pub fn plan_old_scale_down(
    d: &Deployment,
    all: &[&ReplicaSet],
    old: &[&ReplicaSet],
    new_rs: &ReplicaSet,
) -> Vec<Scale> {
    let old_pods: i32 = old.iter().map(|r| rs_replicas(r)).sum();
    if old_pods == 0 {
        return vec![];
    }
    let all_pods: i32 = all.iter().map(|r| rs_replicas(r)).sum();
    let min_available = d_replicas(d) - max_unavailable(d);
    let new_unavailable = rs_replicas(new_rs) - rs_available(new_rs);
    let max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return vec![];
    }
    let mut sorted: Vec<ReplicaSet> = old.iter().map(|r| (*r).clone()).collect();
    sorted.sort_by(by_creation);
    let mut sizes: BTreeMap<String, (i32, i32)> = sorted
        .iter()
        .map(|r| (rs_name(r).to_string(), (rs_replicas(r), rs_replicas(r))))
        .collect();

    // Clean up unhealthy replicas first (old pods that are not available).
    let mut cleaned = 0;
    for rs in &sorted {
        if cleaned >= max_scaled_down {
            break;
        }
        let cur = sizes[rs_name(rs)].1;
        let avail = rs_available(rs);
        if cur == 0 || cur == avail {
            continue;
        }
        let n = (max_scaled_down - cleaned).min(cur - avail);
        sizes.get_mut(rs_name(rs)).expect("present").1 = cur - n;
        cleaned += n;
    }

    // Then scale down available old pods while keeping minAvailable.
    let available: i32 = all
        .iter()
        .filter(|r| !sizes.contains_key(rs_name(r)))
        .map(|r| rs_available(r))
        .sum::<i32>()
        + sorted.iter().map(rs_available).sum::<i32>();
    if available > min_available {
        let total = available - min_available;
        let mut done = 0;
        for rs in &sorted {
            if done >= total {
                break;
            }
            let cur = sizes[rs_name(rs)].1;
            if cur == 0 {
                continue;
            }
            let n = cur.min(total - done);
            sizes.get_mut(rs_name(rs)).expect("present").1 = cur - n;
            done += n;
        }
    }
    sorted
        .iter()
        .filter_map(|rs| {
            let (from, to) = sizes[rs_name(rs)];
            (from != to).then(|| Scale {
                name: rs_name(rs).to_string(),
                from,
                to,
            })
        })
        .collect()
}

/// Upstream `FindActiveOrLatest`.
pub fn find_active_or_latest<'a>(
    new_rs: Option<&'a ReplicaSet>,
    old: &[&'a ReplicaSet],
) -> Option<&'a ReplicaSet> {
    if new_rs.is_none() && old.is_empty() {
        return None;
    }
    let mut olds: Vec<&ReplicaSet> = old.to_vec();
    olds.sort_by(|a, b| by_creation(b, a));
    let active: Vec<&ReplicaSet> = olds
        .iter()
        .copied()
        .chain(new_rs)
        .filter(|r| rs_replicas(r) > 0)
        .collect();
    match active.len() {
        0 => new_rs.or(olds.first().copied()),
        1 => Some(active[0]),
        _ => None,
    }
}

fn desired_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(&rs.metadata, DESIRED_REPLICAS).and_then(|v| v.parse().ok())
}

fn max_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(&rs.metadata, MAX_REPLICAS).and_then(|v| v.parse().ok())
}

/// Upstream `IsSaturated`.
pub fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    desired_annotation(rs) == Some(d_replicas(d))
        && rs_available(rs) == d_replicas(d)
        && rs_replicas(rs) == d_replicas(d)
}

/// Upstream `isScalingEvent`: an active ReplicaSet's desired-replicas annotation
/// differs from the Deployment's replicas.
pub fn is_scaling_event(d: &Deployment, all: &[&ReplicaSet]) -> bool {
    all.iter()
        .filter(|r| rs_replicas(r) > 0)
        .any(|r| desired_annotation(r).is_some_and(|v| v != d_replicas(d)))
}

fn round_half_away(x: f64) -> i32 {
    x.round() as i32
}

/// Upstream `scale`: the target size of each ReplicaSet when the Deployment was
/// resized (proportional scaling across active ReplicaSets during a rollout). Every
/// returned entry is written (sizes and replica annotations), changed or not.
pub fn plan_proportional_scale(
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    old: &[&ReplicaSet],
) -> Vec<Scale> {
    let desired = d_replicas(d);
    if let Some(rs) = find_active_or_latest(new_rs, old) {
        return vec![Scale {
            name: rs_name(rs).to_string(),
            from: rs_replicas(rs),
            to: desired,
        }];
    }
    if is_saturated(d, new_rs) {
        return old
            .iter()
            .filter(|r| rs_replicas(r) > 0)
            .map(|r| Scale {
                name: rs_name(r).to_string(),
                from: rs_replicas(r),
                to: 0,
            })
            .collect();
    }
    if !is_rolling(d) {
        return vec![];
    }
    let mut all: Vec<&ReplicaSet> = old
        .iter()
        .copied()
        .chain(new_rs)
        .filter(|r| rs_replicas(r) > 0)
        .collect();
    let all_replicas: i32 = all.iter().map(|r| rs_replicas(r)).sum();
    let allowed = if desired > 0 {
        desired + max_surge(d)
    } else {
        0
    };
    let to_add = allowed - all_replicas;
    match to_add.cmp(&0) {
        // Bigger first; newer first among equals.
        Ordering::Greater => all.sort_by(|a, b| {
            rs_replicas(b)
                .cmp(&rs_replicas(a))
                .then_with(|| by_creation(b, a))
        }),
        // Bigger first; older first among equals.
        Ordering::Less => all.sort_by(|a, b| {
            rs_replicas(b)
                .cmp(&rs_replicas(a))
                .then_with(|| by_creation(a, b))
        }),
        Ordering::Equal => {}
    }
    let status_replicas = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let mut added = 0;
    let mut sizes: Vec<i32> = Vec::with_capacity(all.len());
    for rs in &all {
        let cur = rs_replicas(rs);
        if to_add != 0 {
            let proportion = if cur == 0 || to_add == added {
                0
            } else {
                let fraction = if desired == 0 {
                    -cur
                } else {
                    let target = desired + max_surge(d);
                    let annotated = max_annotation(rs).unwrap_or(status_replicas);
                    if annotated == 0 {
                        0
                    } else {
                        round_half_away(f64::from(cur) * f64::from(target) / f64::from(annotated))
                            - cur
                    }
                };
                let allowed_left = to_add - added;
                if to_add > 0 {
                    fraction.min(allowed_left)
                } else {
                    fraction.max(allowed_left)
                }
            };
            sizes.push(cur + proportion);
            added += proportion;
        } else {
            sizes.push(cur);
        }
    }
    if to_add != 0 && !sizes.is_empty() {
        sizes[0] = (sizes[0] + to_add - added).max(0);
    }
    all.iter()
        .zip(sizes)
        .map(|(rs, to)| Scale {
            name: rs_name(rs).to_string(),
            from: rs_replicas(rs),
            to,
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// Revisions and annotations
// ---------------------------------------------------------------------------------

fn skip_copy(k: &str) -> bool {
    matches!(
        k,
        LAST_APPLIED
            | REVISION
            | REVISION_HISTORY
            | DESIRED_REPLICAS
            | MAX_REPLICAS
            | DEPRECATED_ROLLBACK_TO
    )
}

/// Upstream `SetReplicasAnnotations`; true if something changed.
pub fn set_replicas_annotations(meta: &mut ObjectMeta, desired: i32, max: i32) -> bool {
    let a = meta.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let v = v.to_string();
        if a.get(k) != Some(&v) {
            a.insert(k.to_string(), v);
            changed = true;
        }
    }
    changed
}

/// Upstream `SetNewReplicaSetAnnotations`: copies the Deployment's annotations, raises
/// the revision to `new_revision` (keeping the old one in revision-history on a
/// rollback), and for a ReplicaSet about to be created sets the replica annotations.
pub fn set_new_rs_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
) -> bool {
    let mut changed = false;
    let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if skip_copy(k) || ann.get(k) == Some(v) {
            continue;
        }
        ann.insert(k.clone(), v.clone());
        changed = true;
    }
    let old = ann.get(REVISION).cloned();
    let old_int = match old.as_deref() {
        None => 0,
        Some(s) => match s.parse::<i64>() {
            Ok(v) => v,
            Err(_) => return changed,
        },
    };
    if old_int < new_revision {
        ann.insert(REVISION.into(), new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            let hist = ann.get(REVISION_HISTORY).cloned().unwrap_or_default();
            let mut revs: Vec<String> = hist
                .split(',')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            revs.push(old);
            while revs.join(",").len() > MAX_REV_HISTORY_CHARS && revs.len() > 1 {
                revs.remove(0);
            }
            ann.insert(REVISION_HISTORY.into(), revs.join(","));
        }
    }
    if !exists {
        let desired = d_replicas(d);
        if set_replicas_annotations(&mut rs.metadata, desired, desired + max_surge(d)) {
            changed = true;
        }
    }
    changed
}

/// A new ReplicaSet for the Deployment's current template (upstream
/// `getNewReplicaSet`'s create branch), sized by [`new_rs_new_replicas`].
pub fn new_replica_set(d: &Deployment, old: &[&ReplicaSet], new_revision: i64) -> ReplicaSet {
    let spec = dspec(d);
    let collision = d.status.as_ref().and_then(|s| s.collision_count);
    let hash = compute_hash(&spec.template, collision);
    let mut template = spec.template.clone();
    let tm = template.metadata.get_or_insert_with(Default::default);
    tm.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(DEFAULT_UNIQUE_LABEL.into(), hash.clone());
    let mut selector: LabelSelector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(DEFAULT_UNIQUE_LABEL.into(), hash.clone());
    let name = d.metadata.name.clone().unwrap_or_default();
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}")),
            namespace: d.metadata.namespace.clone(),
            labels: tm.labels.clone(),
            owner_references: Some(vec![new_controller_ref(
                "apps/v1",
                "Deployment",
                &name,
                d.metadata.uid.as_deref().unwrap_or_default(),
            )]),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(0),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    };
    let mut all: Vec<&ReplicaSet> = old.to_vec();
    all.push(&rs);
    let n = new_rs_new_replicas(d, &all, &rs);
    if let Some(s) = rs.spec.as_mut() {
        s.replicas = Some(n);
    }
    set_new_rs_annotations(d, &mut rs, new_revision, false);
    rs
}

/// Upstream `cleanupDeployment`: the old ReplicaSets to delete beyond
/// `revisionHistoryLimit` (oldest revisions first; only fully scaled-down, synced ones).
pub fn plan_cleanup(d: &Deployment, old: &[&ReplicaSet]) -> Vec<String> {
    let limit = dspec(d).revision_history_limit.unwrap_or(10);
    let mut alive: Vec<&ReplicaSet> = old
        .iter()
        .copied()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .collect();
    let diff = alive.len() as i64 - i64::from(limit);
    if diff <= 0 {
        return vec![];
    }
    alive.sort_by(|a, b| {
        revision(a)
            .cmp(&revision(b))
            .then_with(|| by_creation(a, b))
    });
    alive
        .into_iter()
        .take(diff as usize)
        .filter(|rs| {
            let observed = rs
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            rs_status_replicas(rs) == 0
                && rs_replicas(rs) == 0
                && rs.metadata.generation.unwrap_or(0) <= observed
        })
        .map(|rs| rs_name(rs).to_string())
        .collect()
}

// ---------------------------------------------------------------------------------
// Status and conditions
// ---------------------------------------------------------------------------------

/// A condition (upstream `NewDeploymentCondition`).
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    msg: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(msg),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The condition of type `t`.
pub fn get_condition<'a>(st: &'a DeploymentStatus, t: &str) -> Option<&'a DeploymentCondition> {
    st.conditions.as_ref()?.iter().find(|c| c.type_ == t)
}

/// Upstream `SetDeploymentCondition`: no-op for the same status and reason; keeps
/// the transition time when only the reason changes.
pub fn set_condition(st: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(cur) = get_condition(st, &c.type_) {
        if cur.status == c.status && cur.reason == c.reason {
            return;
        }
        if cur.status == c.status {
            c.last_transition_time = cur.last_transition_time.clone();
        }
    }
    remove_condition(st, &c.type_);
    st.conditions.get_or_insert_with(Vec::new).push(c);
}

/// Upstream `RemoveDeploymentCondition`.
pub fn remove_condition(st: &mut DeploymentStatus, t: &str) {
    if let Some(cs) = st.conditions.as_mut() {
        cs.retain(|c| c.type_ != t);
    }
}

/// Upstream `calculateStatus` with the Available condition.
pub fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let available: i32 = all.iter().map(|r| rs_available(r)).sum();
    let total: i32 = all.iter().map(|r| rs_replicas(r)).sum();
    let old = d.status.clone().unwrap_or_default();
    let mut st = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: omitempty(all.iter().map(|r| rs_status_replicas(r)).sum()),
        updated_replicas: omitempty(new_rs.map(rs_status_replicas).unwrap_or(0)),
        ready_replicas: omitempty(all.iter().map(|r| rs_ready(r)).sum()),
        available_replicas: omitempty(available),
        unavailable_replicas: omitempty((total - available).max(0)),
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
        terminating_replicas: None,
    };
    if available >= d_replicas(d) - max_unavailable(d) {
        set_condition(
            &mut st,
            condition(
                "Available",
                "True",
                MIN_AVAILABLE,
                "Deployment has minimum availability.".into(),
                now,
            ),
        );
    } else {
        set_condition(
            &mut st,
            condition(
                "Available",
                "False",
                MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.".into(),
                now,
            ),
        );
    }
    st
}

/// Upstream `DeploymentComplete`.
pub fn deployment_complete(d: &Deployment, st: &DeploymentStatus) -> bool {
    let r = d_replicas(d);
    st.updated_replicas.unwrap_or(0) == r
        && st.replicas.unwrap_or(0) == r
        && st.available_replicas.unwrap_or(0) == r
        && st.observed_generation.unwrap_or(0) >= d.metadata.generation.unwrap_or(0)
}

/// Upstream `DeploymentProgressing`.
pub fn deployment_progressing(d: &Deployment, st: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let g = |v: Option<i32>| v.unwrap_or(0);
    let old_old = g(old.replicas) - g(old.updated_replicas);
    let new_old = g(st.replicas) - g(st.updated_replicas);
    g(st.updated_replicas) > g(old.updated_replicas)
        || new_old < old_old
        || g(st.ready_replicas) > g(old.ready_replicas)
        || g(st.available_replicas) > g(old.available_replicas)
}

/// Upstream `DeploymentTimedOut`.
pub fn deployment_timed_out(d: &Deployment, st: &DeploymentStatus, now: Timestamp) -> bool {
    let Some(deadline) = progress_deadline(d) else {
        return false;
    };
    let Some(c) = get_condition(st, "Progressing") else {
        return false;
    };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE_REASON) => false,
        Some(TIMED_OUT_REASON) => true,
        _ => c
            .last_update_time
            .as_ref()
            .is_some_and(|t| t.0.as_second() + i64::from(deadline) < now.as_second()),
    }
}

/// Upstream `syncRolloutStatus`'s status: [`calculate_status`] plus the Progressing
/// condition and the ReplicaFailure condition copied from the ReplicaSets.
pub fn rollout_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    now: Timestamp,
) -> DeploymentStatus {
    let mut st = calculate_status(d, all, new_rs, now);
    if progress_deadline(d).is_none() {
        remove_condition(&mut st, "Progressing");
    }
    let old = d.status.clone().unwrap_or_default();
    let current = get_condition(&old, "Progressing").cloned();
    let complete_already = st.replicas == st.updated_replicas
        && current
            .as_ref()
            .is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE_REASON));
    let dname = d.metadata.name.clone().unwrap_or_default();
    if progress_deadline(d).is_some() && !complete_already {
        let subject = match new_rs {
            Some(rs) => format!("ReplicaSet {:?}", rs_name(rs)),
            None => format!("Deployment {dname:?}"),
        };
        if deployment_complete(d, &st) {
            set_condition(
                &mut st,
                condition(
                    "Progressing",
                    "True",
                    NEW_RS_AVAILABLE_REASON,
                    format!("{subject} has successfully progressed."),
                    now,
                ),
            );
        } else if deployment_progressing(d, &st) {
            let mut c = condition(
                "Progressing",
                "True",
                RS_UPDATED_REASON,
                format!("{subject} is progressing."),
                now,
            );
            if let Some(cur) = &current {
                if cur.status == "True" {
                    c.last_transition_time = cur.last_transition_time.clone();
                }
                remove_condition(&mut st, "Progressing");
            }
            set_condition(&mut st, c);
        } else if deployment_timed_out(d, &st, now) {
            set_condition(
                &mut st,
                condition(
                    "Progressing",
                    "False",
                    TIMED_OUT_REASON,
                    format!("{subject} has timed out progressing."),
                    now,
                ),
            );
        }
    }
    // ReplicaFailure of the new (else any) ReplicaSet.
    let failure = new_rs
        .into_iter()
        .chain(all.iter().copied())
        .flat_map(|rs| rs.status.iter().flat_map(|s| s.conditions.iter().flatten()))
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .cloned();
    match failure {
        Some(c) => set_condition(
            &mut st,
            DeploymentCondition {
                type_: "ReplicaFailure".into(),
                status: c.status,
                reason: c.reason,
                message: c.message,
                last_update_time: c.last_transition_time.clone(),
                last_transition_time: c.last_transition_time,
            },
        ),
        None => remove_condition(&mut st, "ReplicaFailure"),
    }
    st
}

/// When to look at a stuck Deployment again (upstream `requeueStuckDeployment`).
pub fn requeue_stuck(d: &Deployment, st: &DeploymentStatus, now: Timestamp) -> Option<Duration> {
    let deadline = progress_deadline(d)?;
    let c = get_condition(st, "Progressing")?;
    if matches!(
        c.reason.as_deref(),
        Some(NEW_RS_AVAILABLE_REASON) | Some(TIMED_OUT_REASON)
    ) {
        return None;
    }
    if deployment_complete(d, st) {
        return None;
    }
    let at = c.last_update_time.as_ref()?.0.as_second() + i64::from(deadline);
    let left = at - now.as_second();
    Some(Duration::from_secs(left.max(0) as u64 + 1))
}

/// Upstream `checkPausedConditions`: the Progressing condition to set when the
/// Deployment was paused or resumed, if any.
pub fn paused_condition(d: &Deployment, now: Timestamp) -> Option<DeploymentCondition> {
    progress_deadline(d)?;
    let st = d.status.clone().unwrap_or_default();
    let c = get_condition(&st, "Progressing");
    if c.is_some_and(|c| c.reason.as_deref() == Some(TIMED_OUT_REASON)) {
        return None;
    }
    let paused_exists = c.is_some_and(|c| c.reason.as_deref() == Some(PAUSED_REASON));
    let paused = dspec(d).paused.unwrap_or(false);
    if paused && !paused_exists {
        Some(condition(
            "Progressing",
            "Unknown",
            PAUSED_REASON,
            "Deployment is paused".into(),
            now,
        ))
    } else if !paused && paused_exists {
        Some(condition(
            "Progressing",
            "Unknown",
            RESUMED_REASON,
            "Deployment is resumed".into(),
            now,
        ))
    } else {
        None
    }
}

fn status_eq(a: &DeploymentStatus, b: &DeploymentStatus) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

// ---------------------------------------------------------------------------------
// IO: the controller
// ---------------------------------------------------------------------------------

/// The Deployment controller.
pub struct DeploymentController {
    client: kube::Client,
    deployments: Store<Deployment>,
    rss: Store<ReplicaSet>,
    pods: Store<Pod>,
    events: Arc<dyn EventSink>,
}

impl DeploymentController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(DeploymentController {
            client,
            deployments: factory.informer::<Deployment>().store(),
            rss: factory.informer::<ReplicaSet>().store(),
            pods: factory.informer::<Pod>().store(),
            events,
        })
    }

    fn deployment_for_rs(deps: &Store<Deployment>, rs: &ReplicaSet) -> Vec<String> {
        let ns = rs.metadata.namespace.as_deref();
        if let Some(r) = controller_of(&rs.metadata) {
            if r.kind != "Deployment" {
                return vec![];
            }
            return deps
                .get_by_name(ns, &r.name)
                .filter(|d| d.metadata.uid.as_deref() == Some(r.uid.as_str()))
                .map(|d| object_key(&*d))
                .into_iter()
                .collect();
        }
        let l = labels(&rs.metadata);
        deps.list_namespace(ns.unwrap_or_default())
            .iter()
            .filter(|d| {
                let s = &dspec(d).selector;
                !selector_is_empty(s) && selector_matches(s, &l)
            })
            .map(|d| object_key(&**d))
            .collect()
    }
}

#[async_trait::async_trait]
impl Controller for DeploymentController {
    fn name(&self) -> &'static str {
        "deployment"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory.informer::<Deployment>().add_event_handler(
            move |n: Notification<Deployment>| q.add(object_key(&**n.object())),
            None,
        );
        let q = queue.clone();
        let deps = self.deployments.clone();
        factory.informer::<ReplicaSet>().add_event_handler(
            move |n: Notification<ReplicaSet>| {
                if let Notification::Updated { old, new } = &n
                    && controller_of(&old.metadata).map(|r| &r.uid)
                        != controller_of(&new.metadata).map(|r| &r.uid)
                {
                    for k in Self::deployment_for_rs(&deps, old) {
                        q.add(k);
                    }
                }
                for k in Self::deployment_for_rs(&deps, n.object()) {
                    q.add(k);
                }
            },
            None,
        );
        // Recreate waits for old pods to go away: pod deletions wake the Deployment.
        let q = queue.clone();
        let deps = self.deployments.clone();
        let rss = self.rss.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| {
                if let Notification::Deleted { obj, .. } = n
                    && let Some(r) = controller_of(&obj.metadata)
                    && r.kind == "ReplicaSet"
                    && let Some(rs) = rss.get_by_name(obj.metadata.namespace.as_deref(), &r.name)
                {
                    for k in Self::deployment_for_rs(&deps, &rs) {
                        if deps.get(&k).is_some_and(|d| !is_rolling(&d)) {
                            q.add(k);
                        }
                    }
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, _) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let Some(d) = self.deployments.get(key) else {
            return Ok(Action::Done);
        };
        let mut d = (*d).clone();
        let now = Timestamp::now();
        let everything = selector_is_empty(&dspec(&d).selector);
        if everything {
            emit(
                &*self.events,
                &d,
                EventType::Warning,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.".into(),
            );
            let mut st = d.status.clone().unwrap_or_default();
            if st.observed_generation < d.metadata.generation {
                st.observed_generation = d.metadata.generation;
                self.write_status(&d, &st).await?;
            }
            return Ok(Action::Done);
        }
        let rss = self.claim_replica_sets(&d, ns).await?;
        let mut io = Io {
            c: self,
            d: &mut d,
            ns,
            rss,
        };
        io.sync(now).await
    }
}

struct Io<'a> {
    c: &'a DeploymentController,
    d: &'a mut Deployment,
    ns: &'a str,
    rss: Vec<ReplicaSet>,
}

impl DeploymentController {
    /// The ReplicaSets this Deployment controls, adopting matching orphans and
    /// releasing owned ones that no longer match (upstream `getReplicaSetsForDeployment`).
    async fn claim_replica_sets(&self, d: &Deployment, ns: &str) -> Result<Vec<ReplicaSet>> {
        let api: Api<ReplicaSet> = Api::namespaced(self.client.clone(), ns);
        let uid = d.metadata.uid.clone().unwrap_or_default();
        let deleting = d.metadata.deletion_timestamp.is_some();
        let sel = &dspec(d).selector;
        let mut out = Vec::new();
        for rs in self.rss.list_namespace(ns) {
            let matches = selector_matches(sel, &labels(&rs.metadata));
            // claim_decision works on pods; reuse its logic through an equivalent view.
            let as_pod = Pod {
                metadata: rs.metadata.clone(),
                ..Default::default()
            };
            match claim_decision(&uid, ns, deleting, &as_pod, matches) {
                Claim::Owned => out.push((*rs).clone()),
                Claim::Ignore => {}
                Claim::Adopt => {
                    let r = new_controller_ref(
                        "apps/v1",
                        "Deployment",
                        d.metadata.name.as_deref().unwrap_or_default(),
                        &uid,
                    );
                    let patch =
                        json!({"metadata": {"ownerReferences": [r], "uid": rs.metadata.uid}});
                    match api
                        .patch(
                            rs_name(&rs),
                            &PatchParams::default(),
                            &Patch::Strategic(patch),
                        )
                        .await
                    {
                        Ok(n) => out.push(n),
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Claim::Release => {
                    let patch = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": uid}], "uid": rs.metadata.uid}});
                    match api
                        .patch(
                            rs_name(&rs),
                            &PatchParams::default(),
                            &Patch::Strategic(patch),
                        )
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
        Ok(out)
    }

    async fn write_status(&self, d: &Deployment, st: &DeploymentStatus) -> Result<()> {
        let api: Api<Deployment> = Api::namespaced(
            self.client.clone(),
            d.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let mut obj = d.clone();
        obj.status = Some(st.clone());
        match api
            .replace_status(
                d.metadata.name.as_deref().unwrap_or_default(),
                &PostParams::default(),
                &obj,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Io<'_> {
    fn api(&self) -> Api<ReplicaSet> {
        Api::namespaced(self.c.client.clone(), self.ns)
    }

    async fn sync(&mut self, now: Timestamp) -> Result<Action> {
        let original = self.d.status.clone().unwrap_or_default();
        if self.d.metadata.deletion_timestamp.is_some() {
            return self.sync_status_only(now, &original).await;
        }
        if let Some(c) = paused_condition(self.d, now) {
            let mut st = original.clone();
            set_condition(&mut st, c);
            self.c.write_status(self.d, &st).await?;
            return Ok(Action::Done);
        }
        let paused = dspec(self.d).paused.unwrap_or(false);
        let all: Vec<&ReplicaSet> = self.rss.iter().collect();
        if paused || is_scaling_event(self.d, &all) {
            return self.scale_sync(now, &original).await;
        }
        if is_rolling(self.d) {
            self.rollout_rolling(now, &original).await
        } else {
            self.rollout_recreate(now, &original).await
        }
    }

    async fn sync_status_only(
        &mut self,
        now: Timestamp,
        original: &DeploymentStatus,
    ) -> Result<Action> {
        let (new_rs, old) = self.new_and_old(false, now).await?;
        let all: Vec<&ReplicaSet> = old.iter().chain(new_rs.as_ref()).collect();
        let st = calculate_status(self.d, &all, new_rs.as_ref(), now);
        if !status_eq(&st, original) {
            self.c.write_status(self.d, &st).await?;
        }
        Ok(Action::Done)
    }

    /// Upstream `getAllReplicaSetsAndSyncRevision`: (new, old). Creates the new
    /// ReplicaSet when asked; syncs the revision annotations of the Deployment and the
    /// new ReplicaSet.
    async fn new_and_old(
        &mut self,
        create: bool,
        now: Timestamp,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>)> {
        let existing = find_new_rs(self.d, &self.rss).cloned();
        let old: Vec<ReplicaSet> = self
            .rss
            .iter()
            .filter(|r| {
                existing
                    .as_ref()
                    .is_none_or(|n| n.metadata.uid != r.metadata.uid)
            })
            .cloned()
            .collect();
        let new_revision = max_revision(&old) + 1;
        let mut st = self.d.status.clone().unwrap_or_default();
        let mut status_changed = false;
        let new_rs = if let Some(ex) = existing {
            let mut copy = ex.clone();
            let ann_changed = set_new_rs_annotations(self.d, &mut copy, new_revision, true);
            let mrs = dspec(self.d).min_ready_seconds;
            let mrs_changed = copy
                .spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0)
                != mrs.unwrap_or(0);
            let rs = if ann_changed || mrs_changed {
                let patch = json!({
                    "metadata": {"annotations": copy.metadata.annotations, "resourceVersion": copy.metadata.resource_version},
                    "spec": {"minReadySeconds": mrs.unwrap_or(0)},
                });
                self.api()
                    .patch(
                        rs_name(&copy),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await?
            } else {
                copy
            };
            if progress_deadline(self.d).is_some() && get_condition(&st, "Progressing").is_none() {
                set_condition(
                    &mut st,
                    condition(
                        "Progressing",
                        "True",
                        FOUND_NEW_RS_REASON,
                        format!("Found new replica set {:?}", rs_name(&rs)),
                        now,
                    ),
                );
                status_changed = true;
            }
            Some(rs)
        } else if create {
            let old_refs: Vec<&ReplicaSet> = old.iter().collect();
            let rs = new_replica_set(self.d, &old_refs, new_revision);
            let created = match self.api().create(&PostParams::default(), &rs).await {
                Ok(c) => {
                    let n = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                    if n > 0 {
                        emit(
                            &*self.c.events,
                            &*self.d,
                            EventType::Normal,
                            "ScalingReplicaSet",
                            format!("Scaled up replica set {} from 0 to {n}", rs_name(&c)),
                        );
                    }
                    if progress_deadline(self.d).is_some() {
                        set_condition(
                            &mut st,
                            condition(
                                "Progressing",
                                "True",
                                NEW_RS_REASON,
                                format!("Created new replica set {:?}", rs_name(&c)),
                                now,
                            ),
                        );
                        status_changed = true;
                    }
                    c
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    // Ours already (a stale cache)? Otherwise a hash collision.
                    let found = self.api().get_opt(rs_name(&rs)).await?;
                    let ours = found.as_ref().is_some_and(|f| {
                        controller_of(&f.metadata)
                            .is_some_and(|r| Some(&r.uid) == self.d.metadata.uid.as_ref())
                            && f.spec
                                .as_ref()
                                .and_then(|s| s.template.as_ref())
                                .is_some_and(|t| equal_ignore_hash(t, &dspec(self.d).template))
                    });
                    if let (true, Some(f)) = (ours, found) {
                        f
                    } else {
                        st.collision_count = Some(st.collision_count.unwrap_or(0) + 1);
                        self.c.write_status(self.d, &st).await?;
                        return Err(Error::Invalid(format!(
                            "hash collision for replica set {}",
                            rs_name(&rs)
                        )));
                    }
                }
                Err(e) => {
                    let msg = format!(
                        "Failed to create new replica set {:?}: {}",
                        rs_name(&rs),
                        error_message(&e)
                    );
                    if progress_deadline(self.d).is_some() {
                        set_condition(
                            &mut st,
                            condition(
                                "Progressing",
                                "False",
                                FAILED_RS_CREATE_REASON,
                                msg.clone(),
                                now,
                            ),
                        );
                        self.c.write_status(self.d, &st).await?;
                    }
                    emit(
                        &*self.c.events,
                        &*self.d,
                        EventType::Warning,
                        FAILED_RS_CREATE_REASON,
                        msg,
                    );
                    return Err(e.into());
                }
            };
            self.rss.push(created.clone());
            Some(created)
        } else {
            None
        };
        // The Deployment carries the revision of its new ReplicaSet.
        if let Some(rs) = &new_rs
            && let Some(rev) = annotation(&rs.metadata, REVISION)
            && annotation(&self.d.metadata, REVISION) != Some(rev)
        {
            // An update, as upstream (the deployment-controller role grants `update`
            // on deployments, not `patch`); a conflict retries the reconcile.
            let api: Api<Deployment> = Api::namespaced(self.c.client.clone(), self.ns);
            let mut d = self.d.clone();
            d.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(REVISION.to_string(), rev.to_string());
            let updated = api
                .replace(
                    self.d.metadata.name.as_deref().unwrap_or_default(),
                    &PostParams::default(),
                    &d,
                )
                .await?;
            self.d.metadata = updated.metadata;
        }
        if status_changed {
            self.c.write_status(self.d, &st).await?;
            self.d.status = Some(st);
            // Re-read the resourceVersion on the next write.
            if let Some(fresh) = Api::<Deployment>::namespaced(self.c.client.clone(), self.ns)
                .get_opt(self.d.metadata.name.as_deref().unwrap_or_default())
                .await?
            {
                self.d.metadata = fresh.metadata;
            }
        }
        Ok((new_rs, old))
    }

    /// Scales one ReplicaSet and sets its replica annotations (upstream `scaleReplicaSet`).
    async fn scale_rs(
        &mut self,
        rs: &ReplicaSet,
        to: i32,
        force_annotations: bool,
    ) -> Result<Option<ReplicaSet>> {
        let from = rs_replicas(rs);
        if from == to && !force_annotations {
            return Ok(None);
        }
        let mut meta = rs.metadata.clone();
        let desired = d_replicas(self.d);
        let ann = set_replicas_annotations(&mut meta, desired, desired + max_surge(self.d));
        if from == to && !ann {
            return Ok(None);
        }
        let patch = json!({
            "metadata": {"annotations": meta.annotations, "resourceVersion": rs.metadata.resource_version},
            "spec": {"replicas": to},
        });
        let updated = self
            .api()
            .patch(rs_name(rs), &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        if from != to {
            let op = if to > from { "up" } else { "down" };
            emit(
                &*self.c.events,
                &*self.d,
                EventType::Normal,
                "ScalingReplicaSet",
                format!(
                    "Scaled {op} replica set {} from {from} to {to}",
                    rs_name(rs)
                ),
            );
        }
        if let Some(slot) = self
            .rss
            .iter_mut()
            .find(|r| r.metadata.uid == updated.metadata.uid)
        {
            *slot = updated.clone();
        }
        Ok(Some(updated))
    }

    fn refresh(&self, rs: &ReplicaSet) -> ReplicaSet {
        self.rss
            .iter()
            .find(|r| r.metadata.uid == rs.metadata.uid)
            .cloned()
            .unwrap_or_else(|| rs.clone())
    }

    async fn scale_sync(&mut self, now: Timestamp, original: &DeploymentStatus) -> Result<Action> {
        let (new_rs, old) = self.new_and_old(false, now).await?;
        let old_refs: Vec<&ReplicaSet> = old.iter().collect();
        let plan = plan_proportional_scale(self.d, new_rs.as_ref(), &old_refs);
        for s in plan {
            if let Some(rs) = self.rss.iter().find(|r| rs_name(r) == s.name).cloned() {
                self.scale_rs(&rs, s.to, true).await?;
            }
        }
        let new_rs = new_rs.map(|r| self.refresh(&r));
        let old: Vec<ReplicaSet> = old.iter().map(|r| self.refresh(r)).collect();
        if dspec(self.d).paused.unwrap_or(false) {
            self.cleanup(&old).await?;
        }
        let all: Vec<&ReplicaSet> = old.iter().chain(new_rs.as_ref()).collect();
        let st = calculate_status(self.d, &all, new_rs.as_ref(), now);
        if !status_eq(&st, original) {
            self.c.write_status(self.d, &st).await?;
        }
        Ok(Action::Done)
    }

    async fn cleanup(&self, old: &[ReplicaSet]) -> Result<()> {
        let refs: Vec<&ReplicaSet> = old.iter().collect();
        for name in plan_cleanup(self.d, &refs) {
            match self.api().delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn finish(
        &mut self,
        new_rs: Option<ReplicaSet>,
        old: Vec<ReplicaSet>,
        now: Timestamp,
        original: &DeploymentStatus,
    ) -> Result<Action> {
        let new_rs = new_rs.map(|r| self.refresh(&r));
        let old: Vec<ReplicaSet> = old.iter().map(|r| self.refresh(r)).collect();
        let all: Vec<&ReplicaSet> = old.iter().chain(new_rs.as_ref()).collect();
        let st = rollout_status(self.d, &all, new_rs.as_ref(), now);
        if !status_eq(&st, original) {
            self.c.write_status(self.d, &st).await?;
        }
        Ok(match requeue_stuck(self.d, &st, now) {
            Some(d) => Action::RequeueAfter(d),
            None => Action::Done,
        })
    }

    async fn rollout_rolling(
        &mut self,
        now: Timestamp,
        original: &DeploymentStatus,
    ) -> Result<Action> {
        let (new_rs, old) = self.new_and_old(true, now).await?;
        let Some(new_rs) = new_rs else {
            return self.finish(None, old, now, original).await;
        };
        // Scale up the new ReplicaSet.
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&new_rs)).collect();
        let desired = d_replicas(self.d);
        let target = if rs_replicas(&new_rs) > desired {
            desired
        } else {
            new_rs_new_replicas(self.d, &all, &new_rs)
        };
        if target != rs_replicas(&new_rs) {
            self.scale_rs(&new_rs, target, false).await?;
            return self.finish(Some(new_rs), old, now, original).await;
        }
        // Scale down old ReplicaSets.
        let active_old: Vec<&ReplicaSet> = old.iter().filter(|r| rs_replicas(r) > 0).collect();
        let plan = plan_old_scale_down(self.d, &all, &active_old, &new_rs);
        if !plan.is_empty() {
            for s in plan {
                if let Some(rs) = self.rss.iter().find(|r| rs_name(r) == s.name).cloned() {
                    self.scale_rs(&rs, s.to, false).await?;
                }
            }
            return self.finish(Some(new_rs), old, now, original).await;
        }
        if deployment_complete(self.d, original) {
            self.cleanup(&old).await?;
        }
        self.finish(Some(new_rs), old, now, original).await
    }

    async fn rollout_recreate(
        &mut self,
        now: Timestamp,
        original: &DeploymentStatus,
    ) -> Result<Action> {
        let (new_rs, old) = self.new_and_old(false, now).await?;
        let active_old: Vec<ReplicaSet> =
            old.iter().filter(|r| rs_replicas(r) > 0).cloned().collect();
        if !active_old.is_empty() {
            for rs in &active_old {
                self.scale_rs(rs, 0, false).await?;
            }
            return self.finish(new_rs, old, now, original).await;
        }
        // Wait until no old pod is running.
        let old_uids: Vec<String> = old.iter().filter_map(|r| r.metadata.uid.clone()).collect();
        let old_status: i32 = old.iter().map(rs_status_replicas).sum();
        let old_running = old_status > 0
            || self.c.pods.list_namespace(self.ns).iter().any(|p| {
                controller_of(&p.metadata).is_some_and(|r| old_uids.contains(&r.uid))
                    && !crate::util::is_pod_terminal(p)
            });
        if old_running {
            return self.finish(new_rs, old, now, original).await;
        }
        let (new_rs, old) = match new_rs {
            Some(n) => (Some(n), old),
            None => self.new_and_old(true, now).await?,
        };
        if let Some(n) = &new_rs {
            let desired = d_replicas(self.d);
            self.scale_rs(n, desired, false).await?;
        }
        if deployment_complete(self.d, original) {
            self.cleanup(&old).await?;
        }
        self.finish(new_rs, old, now, original).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        DeploymentSpec, DeploymentStrategy, ReplicaSetStatus, RollingUpdateDeployment,
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn tmpl(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]}
        }))
        .unwrap()
    }

    fn dep(replicas: i32, surge: IntOrString, unavail: IntOrString) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("d".into()),
                namespace: Some("ns".into()),
                uid: Some("duid".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some([("app".to_string(), "web".to_string())].into()),
                    match_expressions: None,
                },
                template: tmpl("v2"),
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavail),
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn rs(name: &str, created: i64, replicas: i32, available: i32, rev: i64) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                creation_timestamp: Some(Time(ts(created))),
                annotations: Some([(REVISION.to_string(), rev.to_string())].into()),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                template: Some(tmpl(name)),
                ..Default::default()
            }),
            status: Some(ReplicaSetStatus {
                replicas,
                available_replicas: Some(available),
                ready_replicas: Some(available),
                ..Default::default()
            }),
        }
    }

    fn i(v: i32) -> IntOrString {
        IntOrString::Int(v)
    }
    fn p(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn hash_is_stable_safe_and_collision_sensitive() {
        let a = compute_hash(&tmpl("v1"), None);
        assert_eq!(a, compute_hash(&tmpl("v1"), None));
        assert_ne!(a, compute_hash(&tmpl("v2"), None));
        assert_ne!(a, compute_hash(&tmpl("v1"), Some(1)));
        assert!(
            a.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{a}"
        );
        assert!(!a.is_empty() && a.len() <= 10);
        // Go: fmt.Sprint(uint32) then SafeEncodeString.
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        // FNV-1a reference values.
        assert_eq!(fnv32a(&[b""]), 0x811c9dc5);
        assert_eq!(fnv32a(&[b"a"]), 0xe40c292c);
        assert_eq!(fnv32a(&[b"foo", b"bar"]), fnv32a(&[b"foobar"]));
    }

    #[test]
    fn equal_ignore_hash_and_find_new() {
        let mut t = tmpl("v2");
        t.metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(DEFAULT_UNIQUE_LABEL.into(), "abc".into());
        assert!(equal_ignore_hash(&t, &tmpl("v2")));
        assert!(!equal_ignore_hash(&t, &tmpl("v1")));
        // An unset non-pointer struct equals its zero value, as in Go.
        let mut zero_structs = tmpl("v2");
        for c in &mut zero_structs.spec.as_mut().unwrap().containers {
            c.resources = Some(Default::default());
        }
        assert_ne!(
            serde_json::to_value(&zero_structs).unwrap(),
            serde_json::to_value(tmpl("v2")).unwrap()
        );
        assert!(equal_ignore_hash(&t, &zero_structs));
        let mut requests = zero_structs.clone();
        requests.spec.as_mut().unwrap().containers[0].resources =
            serde_json::from_value(json!({"requests": {"cpu": "1"}})).unwrap();
        assert!(!equal_ignore_hash(&t, &requests));
        let d = dep(3, i(1), i(0));
        let mut a = rs("v1", 10, 3, 3, 1);
        let mut b = rs("b", 30, 0, 0, 2);
        b.spec.as_mut().unwrap().template = Some(t.clone());
        let mut c = rs("c", 20, 0, 0, 3);
        c.spec.as_mut().unwrap().template = Some(t);
        a.spec.as_mut().unwrap().template = Some(tmpl("v1"));
        let all = vec![a, b, c];
        // The oldest matching one wins.
        assert_eq!(find_new_rs(&d, &all).map(rs_name), Some("c"));
    }

    #[test]
    fn fenceposts() {
        let cases = [
            (10, i(0), i(1), (0, 1)),
            (10, p("25%"), p("25%"), (3, 2)),
            (10, p("0%"), p("0%"), (0, 1)),
            (1, p("25%"), p("25%"), (1, 0)),
            (3, p("10%"), i(5), (1, 5)),
        ];
        for (r, s, u, want) in cases {
            let d = dep(r, s.clone(), u.clone());
            assert_eq!(resolve_fenceposts(&d), want, "{r} {s:?} {u:?}");
        }
        // MaxUnavailable is capped at replicas and is 0 for Recreate.
        assert_eq!(max_unavailable(&dep(3, i(1), i(5))), 3);
        let mut rec = dep(3, i(1), i(1));
        rec.spec.as_mut().unwrap().strategy = Some(DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        });
        assert_eq!((max_surge(&rec), max_unavailable(&rec)), (0, 0));
    }

    #[test]
    fn new_rs_growth() {
        // (replicas, surge, [old sizes], new size) -> new target
        let cases: &[(i32, i32, &[i32], i32, i32)] = &[
            (10, 1, &[10], 0, 1),
            (10, 3, &[10], 0, 3),
            (10, 3, &[10], 3, 3),
            (10, 3, &[8], 3, 5),
            (10, 3, &[0], 8, 10),
            (10, 0, &[10], 0, 0),
            (10, 2, &[], 0, 10),
        ];
        for (r, surge, olds, new, want) in cases {
            let d = dep(*r, i(*surge), i(1));
            let olds: Vec<ReplicaSet> = olds
                .iter()
                .enumerate()
                .map(|(k, &n)| rs(&format!("o{k}"), k as i64, n, n, 1))
                .collect();
            let n = rs("new", 100, *new, 0, 2);
            let mut all: Vec<&ReplicaSet> = olds.iter().collect();
            all.push(&n);
            assert_eq!(
                new_rs_new_replicas(&d, &all, &n),
                *want,
                "{r} {surge} {new}"
            );
        }
    }

    #[test]
    fn old_scale_down_respects_min_available() {
        // maxUnavailable=0, maxSurge=1, 10 replicas: old 10 available, new 1 not yet available.
        let d = dep(10, i(1), i(0));
        let old = rs("old", 1, 10, 10, 1);
        let new = rs("new", 2, 1, 0, 2);
        let all = [&old, &new];
        assert_eq!(plan_old_scale_down(&d, &all, &[&old], &new), vec![]);
        // The new pod became available: one old pod may go.
        let new = rs("new", 2, 1, 1, 2);
        let all = [&old, &new];
        assert_eq!(
            plan_old_scale_down(&d, &all, &[&old], &new),
            vec![Scale {
                name: "old".into(),
                from: 10,
                to: 9
            }]
        );
        // Unhealthy old pods are cleaned up first, then available ones; oldest first.
        let d = dep(10, i(2), i(2));
        let o1 = rs("o1", 1, 5, 3, 1);
        let o2 = rs("o2", 2, 5, 5, 2);
        let new = rs("new", 3, 2, 0, 3);
        let all = [&o1, &o2, &new];
        // all=12, minAvailable=8, newUnavailable=2 -> maxScaledDown=2: the 2 unhealthy of o1.
        // available=8 -> nothing more.
        assert_eq!(
            plan_old_scale_down(&d, &all, &[&o1, &o2], &new),
            vec![Scale {
                name: "o1".into(),
                from: 5,
                to: 3
            }]
        );
        // Nothing old left.
        let z = rs("z", 1, 0, 0, 1);
        assert_eq!(plan_old_scale_down(&d, &[&z, &new], &[&z], &new), vec![]);
    }

    #[test]
    fn rolling_update_simulation_never_drops_below_min_available() {
        // Drive the plan functions like the controller with instant pod readiness on
        // scale-up of the new RS, checking availability never drops below
        // replicas - maxUnavailable and the total never exceeds replicas + maxSurge.
        for (r, s, u) in [
            (10, i(1), i(0)),
            (10, p("25%"), p("25%")),
            (5, i(0), i(1)),
            (7, p("50%"), p("10%")),
        ] {
            let d = dep(r, s.clone(), u.clone());
            let (surge, unavail) = (max_surge(&d), max_unavailable(&d));
            let mut old = rs("old", 1, r, r, 1);
            let mut new = rs("new", 2, 0, 0, 2);
            for step in 0..200 {
                let all = [&old, &new];
                let target = new_rs_new_replicas(&d, &all, &new);
                if target != rs_replicas(&new) {
                    new.spec.as_mut().unwrap().replicas = Some(target);
                } else {
                    let plan = plan_old_scale_down(&d, &all, &[&old], &new);
                    for sc in plan {
                        old.spec.as_mut().unwrap().replicas = Some(sc.to);
                        old.status.as_mut().unwrap().available_replicas =
                            Some(sc.to.min(rs_available(&old)));
                        old.status.as_mut().unwrap().replicas = sc.to;
                    }
                }
                // New pods become available one step later.
                let nr = rs_replicas(&new);
                new.status.as_mut().unwrap().available_replicas = Some(nr);
                new.status.as_mut().unwrap().replicas = nr;
                let avail = rs_available(&old) + rs_available(&new);
                assert!(avail >= r - unavail, "{r} {s:?} {u:?} step {step}: {avail}");
                assert!(rs_replicas(&old) + rs_replicas(&new) <= r + surge);
                if rs_replicas(&old) == 0 && rs_available(&new) == r {
                    break;
                }
                assert!(step < 199, "rollout did not finish");
            }
        }
    }

    #[test]
    fn proportional_scaling() {
        // Mid-rollout 10 -> 15 with maxSurge 3: old 8 and new 5 (max-replicas 13).
        let mut d = dep(15, i(3), i(2));
        d.status = Some(DeploymentStatus {
            replicas: Some(13),
            ..Default::default()
        });
        let mut old = rs("old", 1, 8, 8, 1);
        let mut new = rs("new", 2, 5, 5, 2);
        for r in [&mut old, &mut new] {
            set_replicas_annotations(&mut r.metadata, 10, 13);
        }
        let plan = plan_proportional_scale(&d, Some(&new), &[&old]);
        let total: i32 = plan.iter().map(|s| s.to).sum();
        assert_eq!(total, 18, "{plan:?}");
        let get = |n: &str| plan.iter().find(|s| s.name == n).unwrap().to;
        // 8*18/13 = 11.08 -> 11 ; 5*18/13 = 6.9 -> 7
        assert_eq!((get("old"), get("new")), (11, 7));
        // Scale down to 0 takes everything.
        let mut z = d.clone();
        z.spec.as_mut().unwrap().replicas = Some(0);
        let plan = plan_proportional_scale(&z, Some(&new), &[&old]);
        assert!(plan.iter().all(|s| s.to == 0), "{plan:?}");
        // A single active RS just takes the new size.
        let idle = rs("idle", 0, 0, 0, 0);
        assert_eq!(
            plan_proportional_scale(&d, Some(&new), &[&idle]),
            vec![Scale {
                name: "new".into(),
                from: 5,
                to: 15
            }]
        );
    }

    #[test]
    fn scaling_event_and_saturation() {
        let d = dep(5, i(1), i(0));
        let mut a = rs("a", 1, 3, 3, 1);
        set_replicas_annotations(&mut a.metadata, 3, 4);
        assert!(is_scaling_event(&d, &[&a]));
        set_replicas_annotations(&mut a.metadata, 5, 6);
        assert!(!is_scaling_event(&d, &[&a]));
        a.spec.as_mut().unwrap().replicas = Some(5);
        a.status.as_mut().unwrap().available_replicas = Some(5);
        assert!(is_saturated(&d, Some(&a)));
    }

    #[test]
    fn revisions_and_rollback_history() {
        let mut d = dep(3, i(1), i(0));
        d.metadata.annotations = Some(
            [
                ("team".to_string(), "x".to_string()),
                (LAST_APPLIED.to_string(), "{}".to_string()),
            ]
            .into(),
        );
        let old = rs("old", 1, 3, 3, 4);
        let n = new_replica_set(&d, &[&old], 5);
        let a = n.metadata.annotations.as_ref().unwrap();
        assert_eq!(a.get(REVISION).map(String::as_str), Some("5"));
        assert_eq!(a.get(DESIRED_REPLICAS).map(String::as_str), Some("3"));
        assert_eq!(a.get(MAX_REPLICAS).map(String::as_str), Some("4"));
        assert_eq!(a.get("team").map(String::as_str), Some("x"));
        assert!(!a.contains_key(LAST_APPLIED));
        assert!(n.metadata.name.as_deref().unwrap().starts_with("d-"));
        let h = n.metadata.labels.as_ref().unwrap()[DEFAULT_UNIQUE_LABEL].clone();
        assert_eq!(
            n.spec
                .as_ref()
                .unwrap()
                .selector
                .match_labels
                .as_ref()
                .unwrap()[DEFAULT_UNIQUE_LABEL],
            h
        );
        assert_eq!(
            n.spec.as_ref().unwrap().replicas,
            Some(1),
            "surge 1 while old holds 3"
        );
        // Rolling back to revision 2: it becomes revision 6, with 2 in the history.
        let mut back = rs("back", 0, 0, 0, 2);
        assert!(set_new_rs_annotations(&d, &mut back, 6, true));
        let a = back.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            (a[REVISION].as_str(), a[REVISION_HISTORY].as_str()),
            ("6", "2")
        );
        // A newer revision is never lowered.
        assert!(!set_new_rs_annotations(&d, &mut back, 3, true));
        assert_eq!(max_revision([&old, &back]), 6);
    }

    #[test]
    fn cleanup_keeps_history_limit() {
        let mut d = dep(3, i(1), i(0));
        d.spec.as_mut().unwrap().revision_history_limit = Some(2);
        let r1 = rs("r1", 1, 0, 0, 1);
        let r2 = rs("r2", 2, 0, 0, 2);
        let r3 = rs("r3", 3, 0, 0, 3);
        let busy = rs("busy", 0, 1, 1, 0);
        assert_eq!(plan_cleanup(&d, &[&r3, &r1, &r2]), vec!["r1".to_string()]);
        // A ReplicaSet that still has replicas is never deleted.
        assert_eq!(plan_cleanup(&d, &[&r3, &busy, &r2]), Vec::<String>::new());
        d.spec.as_mut().unwrap().revision_history_limit = Some(0);
        assert_eq!(plan_cleanup(&d, &[&r3, &r1]).len(), 2);
    }

    #[test]
    fn conditions_progress_and_deadline() {
        let now = 10_000;
        let mut d = dep(2, i(1), i(0));
        d.spec.as_mut().unwrap().progress_deadline_seconds = Some(60);
        d.status = Some(DeploymentStatus {
            conditions: Some(vec![condition(
                "Progressing",
                "True",
                NEW_RS_REASON,
                "x".into(),
                ts(now - 100),
            )]),
            replicas: Some(3),
            updated_replicas: Some(1),
            ready_replicas: Some(2),
            available_replicas: Some(2),
            ..Default::default()
        });
        let old = rs("old", 1, 2, 2, 1);
        let new = rs("new", 2, 1, 0, 2);
        // No progress since the condition was updated 100 s ago > 60 s deadline.
        let st = rollout_status(&d, &[&old, &new], Some(&new), ts(now));
        let c = get_condition(&st, "Progressing").unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some(TIMED_OUT_REASON))
        );
        assert_eq!(
            get_condition(&st, "Available").unwrap().reason.as_deref(),
            Some(MIN_AVAILABLE)
        );
        // Progress: updated replicas grew.
        let new1 = rs("new", 2, 1, 1, 2);
        let st = rollout_status(&d, &[&old, &new1], Some(&new1), ts(now));
        let c = get_condition(&st, "Progressing").unwrap();
        assert_eq!(c.reason.as_deref(), Some(RS_UPDATED_REASON));
        assert_eq!(
            c.last_transition_time,
            Some(Time(ts(now - 100))),
            "transition kept while True"
        );
        assert_eq!(
            requeue_stuck(&d, &st, ts(now)),
            Some(Duration::from_secs(61))
        );
        // Complete.
        let done = rs("new", 2, 2, 2, 2);
        let gone = rs("old", 1, 0, 0, 1);
        let st = rollout_status(&d, &[&gone, &done], Some(&done), ts(now));
        assert!(deployment_complete(&d, &st));
        assert_eq!(
            get_condition(&st, "Progressing").unwrap().reason.as_deref(),
            Some(NEW_RS_AVAILABLE_REASON)
        );
        assert_eq!(requeue_stuck(&d, &st, ts(now)), None);
        // Unavailable.
        let none = rs("new", 2, 2, 0, 2);
        let st = calculate_status(&d, &[&none], Some(&none), ts(now));
        assert_eq!(
            get_condition(&st, "Available").unwrap().reason.as_deref(),
            Some(MIN_UNAVAILABLE)
        );
        assert_eq!(st.unavailable_replicas, Some(2));
    }

    #[test]
    fn paused_and_resumed() {
        let mut d = dep(2, i(1), i(0));
        d.spec.as_mut().unwrap().paused = Some(true);
        let c = paused_condition(&d, ts(1)).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("Unknown", Some(PAUSED_REASON))
        );
        d.status = Some(DeploymentStatus {
            conditions: Some(vec![c]),
            ..Default::default()
        });
        assert!(paused_condition(&d, ts(2)).is_none());
        d.spec.as_mut().unwrap().paused = Some(false);
        assert_eq!(
            paused_condition(&d, ts(3)).unwrap().reason.as_deref(),
            Some(RESUMED_REASON)
        );
    }
}
