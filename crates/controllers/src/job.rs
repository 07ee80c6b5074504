//! The Job controller (upstream `pkg/controller/job`): runs a Job's pods until enough
//! of them succeed, or until its backoff limit or active deadline says it failed.
//!
//! What it does, as upstream v1.33:
//! - pods from the template, owned by the Job (controller reference), named
//!   `<job>-` + suffix (`<job>-<index>-` + suffix in `Indexed` mode, where each pod also
//!   gets the completion index as label, annotation, `JOB_COMPLETION_INDEX` env var and
//!   hostname `<job>-<index>`); at most `parallelism` active, never more than the
//!   completions still missing; slow-start batches; expectations so a burst of watch
//!   events never creates twice;
//! - `NonIndexed` completes when `completions` pods succeeded (with no `completions`,
//!   when one succeeded and none is left active); `Indexed` when every index in
//!   `[0, completions)` has a succeeded pod (`status.completedIndexes` as `1,3-5`);
//! - failures: failed pods (and, for `restartPolicy: OnFailure`, container restarts)
//!   beyond `backoffLimit` → `BackoffLimitExceeded`; `activeDeadlineSeconds` after
//!   `startTime` → `DeadlineExceeded`. Failed pods are replaced after upstream's
//!   exponential back-off (10 s doubling, at most 6 min);
//! - the terminal conditions in two steps, as upstream since 1.31: `SuccessCriteriaMet`
//!   or `FailureTarget` first (remaining active pods are then deleted), and `Complete`
//!   (with `completionTime`) or `Failed` once no pod of the Job is left running;
//! - `podFailurePolicy` (upstream `matchPodFailurePolicy`): the first rule a failed pod
//!   matches, by a non-zero exit code of a container or init container (`In`/`NotIn`,
//!   optionally one container) or by a pod condition, decides: `Ignore` (the failure is
//!   not counted), `FailJob` (`FailureTarget`, then `Failed`, reason `PodFailurePolicy`
//!   with upstream's message) or `Count`; `podReplacementPolicy: Failed` (the API's
//!   default with a policy) replaces a pod being deleted only once it has gone;
//! - `successPolicy` of an Indexed Job (upstream `matchSuccessPolicy`): the first rule
//!   its succeeded indexes meet (all of `succeededIndexes`, or `succeededCount` of them
//!   or of any) gives `SuccessCriteriaMet` and then `Complete` with reason
//!   `SuccessPolicy`, and the indexes still running are stopped;
//! - `backoffLimitPerIndex` of an Indexed Job (upstream's per-index failure
//!   tracking): each pod carries its index's failure counts
//!   (`batch.kubernetes.io/job-index-failure-count`, and the `-ignored-` count for
//!   failures an `Ignore` rule matched), an index fails for good past its limit or on
//!   a `FailIndex` rule (`status.failedIndexes`, never re-run), a failed index is
//!   retried after its own back-off, and the Job fails with `MaxFailedIndexesExceeded`
//!   beyond `maxFailedIndexes`, or with `FailedIndexes` once every index succeeded or
//!   failed;
//! - pods beyond what is wanted are deleted unscheduled, pending, not ready, ready for
//!   less time, more restarts and newer first (upstream `ActivePods`; the replica
//!   set's ranking is used, which also weighs the pod-deletion-cost annotation and
//!   compares times on a log scale);
//! - an Indexed Job's active pods without a valid index, with an index at or above
//!   `completions` (lowered, elastic Indexed Jobs) or doubling another pod's index are
//!   deleted (a ready one is kept);
//! - pods are the Job's by controllerRef and selector: matching orphans are adopted,
//!   owned pods that stop matching are released (upstream `getPodsForJob`);
//! - `spec.managedBy` naming another controller: the Job is left to it (no pods, no
//!   status);
//! - `suspend`: active pods deleted, `Suspended` condition; resuming resets `startTime`;
//! - status `active`, `ready`, `terminating`, `succeeded`, `failed`, `startTime`, and
//!   events (`SuccessfulCreate`, `SuccessfulDelete`, `Completed`, `BackoffLimitExceeded`,
//!   `DeadlineExceeded`, `Suspended`, `Resumed`);
//! - counting as upstream with the `batch.kubernetes.io/job-tracking` finalizer on
//!   every pod it makes (and adopts): a finished pod is recorded by UID in
//!   `status.uncountedTerminatedPods`, then loses the finalizer, then moves into
//!   `succeeded`/`failed` (Indexed Jobs count succeeded pods by `completedIndexes`), so
//!   a pod deleted after that loses nothing; a pod deleted before it finished is a
//!   failure (unless only failed pods are replaced); pods the controller deletes itself
//!   lose the finalizer first and are not counted; a failing Job's unfinished pods
//!   count as failed; the last failed pod of an index to retry keeps it until the next
//!   pod exists; `Complete`/`Failed` wait until nothing is uncounted; a finished or
//!   deleted Job's pods, and orphans, let go of it (upstream `syncOrphanPod`).
//!
//! A sync records at most [`MAX_UNCOUNTED_PODS`] pods in `uncountedTerminatedPods`
//! (upstream `MaxUncountedPods`), so the status stays small and a big Job does not
//! starve the others; the rest wait for the next sync, and the Job does not finish
//! before. The finalizer removals of one sync are sent together, as upstream's
//! goroutine per pod (the client's rate limiter paces them).
//!
//! Not done (deviation): a pod made by an older Ferrokube (without the finalizer)
//! that finishes after an upgrade is taken as counted already.
//!
//! Pure part: [`count_pods`], [`plan`], [`format_indexes`], [`backoff_delay`],
//! [`pod_from_template`]. IO part: [`JobController`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, PodFailurePolicy, SuccessPolicy};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit, reference_to};
use crate::expectations::Expectations;
use crate::podcontrol::{create_pod, delete_pod};
use crate::replicaset::{
    ClaimingOwner, claim_pods, is_not_found, rank_for_deletion, slow_start_batch,
};
use crate::util::{
    controller_of, has_finalizer, is_pod_ready, labels, new_controller_ref, pod_phase,
    selector_is_empty, selector_matches,
};
use crate::{Action, Controller, Error, Result, omitempty, split_key};
use ferrokube_validation::parse_index_intervals;

/// The label and annotation holding an Indexed Job pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// How many counted failures an index had before the pod (`backoffLimitPerIndex`).
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// How many failures an index had that its `podFailurePolicy` ignored.
pub const INDEX_IGNORED_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-ignored-failure-count";
/// The finalizer on every pod this controller makes (upstream
/// `batch.JobTrackingFinalizer`): a finished pod stays until the Job has counted it,
/// so that deleting it (by hand, by pod garbage collection) never loses the count.
pub const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// At most this many pods in `status.uncountedTerminatedPods` after a sync
/// (upstream `MaxUncountedPods`: their UIDs stay under 20 KB).
pub const MAX_UNCOUNTED_PODS: usize = 500;
/// Queue keys of pods whose tracking finalizer may have to go with no Job to sync:
/// this prefix, then `namespace/name`.
const ORPHAN_POD_KEY: &str = "orphan-pod:";
/// Upstream's `DefaultJobPodFailureBackOff` and `MaxJobPodFailureBackOff`.
const BACKOFF_BASE: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(360);
/// Upstream's `MaxPodCreateDeletePerSync`.
const MAX_POD_CREATE_DELETE_PER_SYNC: usize = 500;

/// The Job's pods, counted as upstream's status fields count them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCounts {
    /// Names of the pods neither terminal nor being deleted, the one to delete first
    /// first (see [`rank_for_deletion`]).
    pub active: Vec<String>,
    /// Completion indexes of the active pods (Indexed mode).
    pub active_indexes: BTreeSet<i32>,
    /// Active pods of an Indexed Job that must go (upstream
    /// `appendDuplicatedIndexPodsForRemoval`): without a valid index, with an index
    /// at or above `completions` (after it was lowered), or a second pod of an index.
    pub surplus: Vec<String>,
    pub ready: i32,
    /// Pods being deleted that have not finished.
    pub terminating: i32,
    pub succeeded: i32,
    pub failed: i32,
    /// Indexes in range with a succeeded pod (Indexed mode).
    pub succeeded_indexes: BTreeSet<i32>,
    /// Container restarts of active pods (counted as failures for `OnFailure`).
    pub restarts: i32,
    /// When the newest failed pod finished.
    pub last_failure: Option<Timestamp>,
    /// Completion indexes of the pods being deleted (Indexed mode).
    pub terminating_indexes: BTreeSet<i32>,
    /// Why the Job must fail: the message of the first failed pod a `FailJob` rule of
    /// its `podFailurePolicy` matched.
    pub fail_job: Option<String>,
    /// With `backoffLimitPerIndex`: the indexes that failed for good (recorded in
    /// `status.failedIndexes` before, or with a failed pod past the per-index limit or
    /// matched by a `FailIndex` rule).
    pub failed_indexes: BTreeSet<i32>,
    /// With `backoffLimitPerIndex`: for each index to run again, what its next pod
    /// inherits from the index's last failed pod.
    pub index_retries: BTreeMap<i32, IndexRetry>,
    /// UIDs of succeeded pods not yet counted in the status (they still carry the
    /// tracking finalizer and are not in `uncountedTerminatedPods`); NonIndexed mode,
    /// where Indexed Jobs count `completedIndexes` instead.
    pub new_succeeded: Vec<String>,
    /// UIDs of failed pods (terminal, or being deleted where that counts as failed)
    /// not yet counted in the status, as the `podFailurePolicy` counts them.
    pub new_failed: Vec<String>,
    /// Pods that still carry the tracking finalizer, by name, with their UID and
    /// whether it may go now: once the pod finished or counts as failed, except the
    /// last failed pod of an index that runs again (its failure counts pass to the
    /// next pod first, upstream's delayed finalizer removal).
    pub tracked: Vec<TrackedPod>,
}

/// A pod of the Job that still carries [`JOB_TRACKING_FINALIZER`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackedPod {
    pub name: String,
    pub uid: String,
    /// Finished (or counted as failed) and not held back: its finalizer may go.
    pub finished: bool,
    /// Succeeded: when the Job fails, every other pod left counts as failed.
    pub succeeded: bool,
}

/// An index of a Job with `backoffLimitPerIndex` whose last pod failed and which runs
/// again (upstream `podsWithDelayedDeletionPerIndex`): the failure counts its next pod
/// carries in its annotations, and when the failed pod finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexRetry {
    /// `batch.kubernetes.io/job-index-failure-count` of the next pod.
    pub failures: i32,
    /// `batch.kubernetes.io/job-index-ignored-failure-count` of the next pod.
    pub ignored_failures: i32,
    pub finished: Option<Timestamp>,
}

impl IndexRetry {
    /// How long after `now` the index's next pod may start: upstream's back-off for
    /// all the index's failures, counted or ignored, since the last one finished.
    pub fn remaining(&self, now: Timestamp) -> Duration {
        let failures = self.failures.saturating_add(self.ignored_failures);
        self.finished
            .map_or(Duration::ZERO, |last| backoff_left(failures, last, now))
    }
}

/// What a Job's `podFailurePolicy` makes of one failed pod (upstream
/// `matchPodFailurePolicy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyMatch {
    /// An `Ignore` rule: the failure is not counted, against the backoff limit or at all.
    Ignore,
    /// A `FailJob` rule: the Job fails, with this message.
    FailJob(String),
    /// A `FailIndex` rule: the pod's index fails (`backoffLimitPerIndex` only).
    FailIndex,
    /// A `Count` rule, or no rule.
    Count,
}

/// The first rule of `policy` that `pod` (failed) matches, in order: `onExitCodes` on a
/// container (then an init container) that terminated with a non-zero code, or
/// `onPodConditions` on one of the pod's conditions.
pub fn match_pod_failure_policy(policy: Option<&PodFailurePolicy>, pod: &Pod) -> PolicyMatch {
    let Some(policy) = policy else {
        return PolicyMatch::Count;
    };
    let pod_ref = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    let status = pod.status.as_ref();
    for (index, rule) in policy.rules.iter().enumerate() {
        let matched = if let Some(req) = &rule.on_exit_codes {
            let containers = status.and_then(|s| s.container_statuses.as_ref());
            let inits = status.and_then(|s| s.init_container_statuses.as_ref());
            containers
                .into_iter()
                .chain(inits)
                .flatten()
                .find_map(|c| {
                    let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                    let named = req.container_name.as_ref().is_none_or(|n| *n == c.name);
                    let listed = req.values.contains(&code);
                    let operator = match req.operator.as_str() {
                        "In" => listed,
                        "NotIn" => !listed,
                        _ => false,
                    };
                    (named && code != 0 && operator).then(|| {
                        format!(
                            "Container {} for pod {pod_ref} failed with exit code {code} matching {} rule at index {index}",
                            c.name, rule.action
                        )
                    })
                })
        } else {
            let conditions = status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten();
            let patterns = rule.on_pod_conditions.as_deref().unwrap_or_default();
            conditions
                .filter(|c| {
                    patterns
                        .iter()
                        .any(|p| p.type_ == c.type_ && p.status == c.status)
                })
                .map(|c| {
                    format!(
                        "Pod {pod_ref} has condition {} matching {} rule at index {index}",
                        c.type_, rule.action
                    )
                })
                .next()
        };
        let Some(message) = matched else { continue };
        match rule.action.as_str() {
            "Ignore" => return PolicyMatch::Ignore,
            "FailJob" => return PolicyMatch::FailJob(message),
            "FailIndex" => return PolicyMatch::FailIndex,
            "Count" => return PolicyMatch::Count,
            _ => {}
        }
    }
    PolicyMatch::Count
}

fn index_of(pod: &Pod) -> Option<i32> {
    let meta = &pod.metadata;
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(COMPLETION_INDEX))
        .or_else(|| meta.labels.as_ref().and_then(|l| l.get(COMPLETION_INDEX)))
        .and_then(|v| v.parse().ok())
}

/// When a failed pod finished: its containers' last termination, else its last
/// condition change, else its creation.
fn finished_at(pod: &Pod) -> Option<Timestamp> {
    let status = pod.status.as_ref();
    let terminated = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    terminated
        .or_else(|| {
            status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|c| c.last_transition_time.as_ref())
                .map(|t| t.0)
                .max()
        })
        .or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// A count an annotation holds; a missing, malformed or negative one is 0, as upstream.
fn annotation_count(pod: &Pod, key: &str) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|n| *n >= 0)
        .unwrap_or(0)
}

fn has_tracking_finalizer(pod: &Pod) -> bool {
    has_finalizer(&pod.metadata, JOB_TRACKING_FINALIZER)
}

/// `finalizers` with [`JOB_TRACKING_FINALIZER`] once.
fn with_tracking_finalizer(mut finalizers: Vec<String>) -> Vec<String> {
    if !finalizers.iter().any(|f| f == JOB_TRACKING_FINALIZER) {
        finalizers.push(JOB_TRACKING_FINALIZER.to_string());
    }
    finalizers
}

/// Removes the tracking finalizer from pod `name` (upstream's strategic merge patch);
/// a pod already gone has nothing to remove.
async fn remove_tracking_finalizer(api: &Api<Pod>, name: &str) -> kube::Result<()> {
    let patch = serde_json::json!({"metadata": {
        "$deleteFromPrimitiveList/finalizers": [JOB_TRACKING_FINALIZER],
    }});
    match api
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The finished pods whose finalizer goes in this sync: those already in
/// `uncountedTerminatedPods`, then new ones while the status has room for their UIDs
/// (`cap` in all); and whether pods were left for a later sync (upstream
/// `reachedMaxUncountedPods`).
fn within_uncounted_cap<'a>(
    finished: impl Iterator<Item = &'a TrackedPod>,
    uncounted_succeeded: &BTreeSet<&str>,
    uncounted_failed: &BTreeSet<&str>,
    cap: usize,
) -> (Vec<&'a TrackedPod>, bool) {
    let (mut release, new): (Vec<&TrackedPod>, Vec<&TrackedPod>) = finished.partition(|pod| {
        uncounted_succeeded.contains(pod.uid.as_str())
            || uncounted_failed.contains(pod.uid.as_str())
    });
    let room = cap.saturating_sub(uncounted_succeeded.len() + uncounted_failed.len());
    let left_out = new.len() > room;
    release.extend(new.into_iter().take(room));
    (release, left_out)
}

/// `status.uncountedTerminatedPods` with these UIDs (empty lists left out, as upstream
/// serializes them).
fn uncounted_pods(
    succeeded: &[String],
    failed: &[String],
) -> k8s_openapi::api::batch::v1::UncountedTerminatedPods {
    k8s_openapi::api::batch::v1::UncountedTerminatedPods {
        succeeded: (!succeeded.is_empty()).then(|| succeeded.to_vec()),
        failed: (!failed.is_empty()).then(|| failed.to_vec()),
    }
}

fn uid_set(list: Option<&Vec<String>>) -> BTreeSet<&str> {
    list.into_iter().flatten().map(String::as_str).collect()
}

/// The cached pods `job` controls that still hold the tracking finalizer.
fn held_pods(pods: &Store<Pod>, job: &Job) -> Vec<Arc<Pod>> {
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let uid = job.metadata.uid.as_deref();
    pods.list_namespace(ns)
        .into_iter()
        .filter(|p| {
            has_tracking_finalizer(p) && controller_of(&p.metadata).map(|r| r.uid.as_str()) == uid
        })
        .collect()
}

/// Forgets an expected finalizer removal of the Job `key`'s pod `uid`: seen by the pod
/// cache, or never sent.
fn removal_seen(
    going: &parking_lot::Mutex<BTreeMap<String, BTreeSet<String>>>,
    key: &str,
    uid: &str,
) {
    let mut going = going.lock();
    if let Some(uids) = going.get_mut(key) {
        uids.remove(uid);
        if uids.is_empty() {
            going.remove(key);
        }
    }
}

/// Upstream `onlyReplaceFailedPods`: `podReplacementPolicy: Failed`, the default with
/// a `podFailurePolicy`.
fn only_replaces_failed(job: &Job) -> bool {
    let spec = job.spec.as_ref();
    spec.and_then(|s| s.pod_replacement_policy.as_deref()) == Some("Failed")
        || spec.is_some_and(|s| s.pod_failure_policy.is_some())
}

/// The pod's phase as the Job counts it: a pod whose deletion was finished with a
/// grace period of 0 and whose phase is not terminal is `Failed`. The kubelet writes a
/// terminal phase before its last delete, and the pod garbage collector marks a
/// deleted pod never scheduled (or off a node that is gone) `Failed` within its 20 s
/// period; until then the tracking finalizer would keep such a pod, not finished, when
/// only failed pods are replaced. A force delete (grace 0) counts at once.
fn job_pod_phase(pod: &Pod) -> &str {
    match pod_phase(pod) {
        phase @ ("Succeeded" | "Failed") => phase,
        _ if pod.metadata.deletion_timestamp.is_some()
            && pod.metadata.deletion_grace_period_seconds == Some(0) =>
        {
            "Failed"
        }
        phase => phase,
    }
}

/// Upstream `isPodFailed`: failed, or deleted before it succeeded, when any pod being
/// deleted is replaced (such a pod may never reach a terminal phase).
fn counts_as_failed(pod: &Pod, replace_only_failed: bool) -> bool {
    match job_pod_phase(pod) {
        "Failed" => true,
        "Succeeded" => false,
        _ => !replace_only_failed && pod.metadata.deletion_timestamp.is_some(),
    }
}

/// Counts `pods` (the Job's own) at `now` as its spec says: `completions` bounds the
/// indexes that count, the `podFailurePolicy` decides how a failed pod counts, and
/// with `backoffLimitPerIndex` the failures are also counted per index.
pub fn count_pods(job: &Job, pods: &[&Pod], now: Timestamp) -> PodCounts {
    count_pods_expecting(job, pods, now, &BTreeSet::new())
}

/// [`count_pods`] for a Job whose pods with these UIDs are losing their tracking
/// finalizer (patches sent, not yet seen by the pod cache): the status counts them
/// already, so they are neither counted again nor tracked.
///
/// As upstream counts with the tracking finalizer: the totals are the status's
/// counters, plus the pods in its `uncountedTerminatedPods`, plus the finished pods
/// that still carry the finalizer and are in neither. A finished pod without the
/// finalizer was counted before, and a pod deleted since is still in the status.
pub fn count_pods_expecting(
    job: &Job,
    pods: &[&Pod],
    now: Timestamp,
    finalizers_going: &BTreeSet<String>,
) -> PodCounts {
    let spec = job.spec.as_ref();
    let status = job.status.as_ref();
    let uncounted = status.and_then(|s| s.uncounted_terminated_pods.as_ref());
    let uncounted_succeeded = uid_set(uncounted.and_then(|u| u.succeeded.as_ref()));
    let uncounted_failed = uid_set(uncounted.and_then(|u| u.failed.as_ref()));
    let replace_only_failed = only_replaces_failed(job);
    let indexed = spec.and_then(|s| s.completion_mode.as_deref()) == Some("Indexed");
    let completions = spec.and_then(|s| s.completions);
    let policy = spec.and_then(|s| s.pod_failure_policy.as_ref());
    let per_index_limit = spec
        .and_then(|s| s.backoff_limit_per_index)
        .filter(|_| indexed);
    let mut c = PodCounts::default();
    let in_range = |i: i32| i >= 0 && completions.is_none_or(|n| i < n);
    // Per index, its latest failed pod and whether that failure counted.
    let mut last_failed: BTreeMap<i32, (&Pod, bool)> = BTreeMap::new();
    // Per index, the active pod kept (a ready one before one that is not) and whether
    // it is ready.
    let mut kept: BTreeMap<i32, (String, bool)> = BTreeMap::new();
    let mut active: Vec<&Pod> = Vec::new();
    for pod in pods {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let phase = job_pod_phase(pod);
        let tracked = has_tracking_finalizer(pod) && !finalizers_going.contains(uid);
        // Counted by this sync unless the status has it already.
        let uncounted_pod =
            tracked && !uncounted_succeeded.contains(uid) && !uncounted_failed.contains(uid);
        // Upstream counts only pods with a valid index as an Indexed Job's failures.
        let counts_in_mode = !indexed || index_of(pod).is_some_and(in_range);
        if tracked {
            c.tracked.push(TrackedPod {
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: uid.to_string(),
                finished: phase == "Succeeded" || counts_as_failed(pod, replace_only_failed),
                succeeded: phase == "Succeeded",
            });
        }
        match phase {
            "Succeeded" => {
                if uncounted_pod && !indexed {
                    c.new_succeeded.push(uid.to_string());
                }
                if let Some(i) = index_of(pod).filter(|i| indexed && in_range(*i)) {
                    c.succeeded_indexes.insert(i);
                }
            }
            "Failed" => {
                let matched = match_pod_failure_policy(policy, pod);
                let counted = matched != PolicyMatch::Ignore;
                if let (Some(limit), Some(i)) =
                    (per_index_limit, index_of(pod).filter(|i| in_range(*i)))
                {
                    if matched == PolicyMatch::FailIndex
                        || (counted && annotation_count(pod, INDEX_FAILURE_COUNT) >= limit)
                    {
                        c.failed_indexes.insert(i);
                    }
                    let attempts = |p: &Pod| {
                        annotation_count(p, INDEX_FAILURE_COUNT)
                            + annotation_count(p, INDEX_IGNORED_FAILURE_COUNT)
                    };
                    let later = last_failed.get(&i).is_none_or(|(last, _)| {
                        attempts(last) <= attempts(pod) && finished_at(pod) >= finished_at(last)
                    });
                    if later {
                        last_failed.insert(i, (pod, counted));
                    }
                }
                if let PolicyMatch::FailJob(message) = matched {
                    c.fail_job.get_or_insert(message);
                }
                if counted {
                    if uncounted_pod && counts_in_mode {
                        c.new_failed.push(uid.to_string());
                    }
                    c.last_failure = c.last_failure.max(finished_at(pod));
                }
            }
            _ if pod.metadata.deletion_timestamp.is_some() => {
                // Deleted before it finished: a failure, unless only failed pods are
                // replaced (then it counts once its phase says so).
                if counts_as_failed(pod, replace_only_failed) && uncounted_pod && counts_in_mode {
                    c.new_failed.push(uid.to_string());
                }
                c.terminating += 1;
                if let Some(i) = index_of(pod).filter(|_| indexed) {
                    c.terminating_indexes.insert(i);
                }
            }
            _ => {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let ready = is_pod_ready(pod);
                active.push(pod);
                if indexed {
                    match index_of(pod).filter(|i| in_range(*i)) {
                        None => c.surplus.push(name),
                        Some(i) => match kept.get_mut(&i) {
                            None => {
                                kept.insert(i, (name, ready));
                                c.active_indexes.insert(i);
                            }
                            Some(first) if ready && !first.1 => {
                                let replaced = std::mem::replace(first, (name, ready));
                                c.surplus.push(replaced.0);
                            }
                            Some(_) => c.surplus.push(name),
                        },
                    }
                }
                if ready {
                    c.ready += 1;
                }
                let status = pod.status.as_ref();
                c.restarts += status
                    .and_then(|s| s.container_statuses.as_ref())
                    .into_iter()
                    .chain(status.and_then(|s| s.init_container_statuses.as_ref()))
                    .flatten()
                    .map(|s| s.restart_count)
                    .sum::<i32>();
            }
        }
    }
    c.active = rank_for_deletion(&active, &[], now)
        .into_iter()
        .map(|i| active[i].metadata.name.clone().unwrap_or_default())
        .collect();
    let counter = |n: Option<i32>| n.unwrap_or(0).max(0);
    c.failed = counter(status.and_then(|s| s.failed))
        .saturating_add(uncounted_failed.len() as i32)
        .saturating_add(c.new_failed.len() as i32);
    if indexed {
        // Indexes recorded as completed stay completed, even once their pods are gone.
        let recorded = status
            .and_then(|s| s.completed_indexes.as_deref())
            .unwrap_or_default();
        let intervals =
            parse_index_intervals(recorded, completions.unwrap_or(0)).unwrap_or_default();
        c.succeeded_indexes
            .extend(intervals.into_iter().flat_map(|(first, last)| first..=last));
        // Upstream counts an index once, however many of its pods succeeded.
        c.succeeded = c.succeeded_indexes.len() as i32;
    } else {
        c.succeeded = counter(status.and_then(|s| s.succeeded))
            .saturating_add(uncounted_succeeded.len() as i32)
            .saturating_add(c.new_succeeded.len() as i32);
    }
    if per_index_limit.is_some() {
        // An index recorded as failed stays failed, even once its pods are gone.
        let recorded = job
            .status
            .as_ref()
            .and_then(|s| s.failed_indexes.as_deref())
            .unwrap_or_default();
        let intervals =
            parse_index_intervals(recorded, completions.unwrap_or(0)).unwrap_or_default();
        c.failed_indexes
            .extend(intervals.into_iter().flat_map(|(first, last)| first..=last));
        for (i, (pod, counted)) in last_failed {
            let settled = c.succeeded_indexes.contains(&i)
                || c.failed_indexes.contains(&i)
                || c.active_indexes.contains(&i);
            if !settled {
                let retry = IndexRetry {
                    failures: annotation_count(pod, INDEX_FAILURE_COUNT) + i32::from(counted),
                    ignored_failures: annotation_count(pod, INDEX_IGNORED_FAILURE_COUNT)
                        + i32::from(!counted),
                    finished: finished_at(pod),
                };
                c.index_retries.insert(i, retry);
                let held = pod.metadata.uid.as_deref().unwrap_or_default();
                for t in c.tracked.iter_mut().filter(|t| t.uid == held) {
                    t.finished = false;
                }
            }
        }
    }
    c
}

/// `1,3-5,7,8` (upstream's compressed index list).
pub fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last += 1;
            iter.next();
        }
        // Upstream writes two neighbours as a list, three or more as a range.
        out.push(match last - first {
            0 => first.to_string(),
            1 => format!("{first},{last}"),
            _ => format!("{first}-{last}"),
        });
    }
    out.join(",")
}

/// How long after its `failures`-th failure a failed pod is replaced.
pub fn backoff_delay(failures: i32) -> Duration {
    if failures <= 0 {
        return Duration::ZERO;
    }
    let doublings = (failures - 1).min(16) as u32;
    BACKOFF_BASE.saturating_mul(1 << doublings).min(BACKOFF_MAX)
}

/// What is left at `now` of the back-off after `failures` failures, the last at `last`.
fn backoff_left(failures: i32, last: Timestamp, now: Timestamp) -> Duration {
    let end = last.as_millisecond() + backoff_delay(failures).as_millis() as i64;
    Duration::from_millis((end - now.as_millisecond()).max(0).unsigned_abs())
}

/// Why a Job fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    BackoffLimitExceeded,
    DeadlineExceeded,
    /// A `FailJob` rule matched a failed pod; the rule's message.
    PodFailurePolicy(String),
    /// More indexes failed than `maxFailedIndexes` allows.
    MaxFailedIndexesExceeded,
    /// Every index finished and some failed.
    FailedIndexes,
}

impl Failure {
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::BackoffLimitExceeded => "BackoffLimitExceeded",
            Failure::DeadlineExceeded => "DeadlineExceeded",
            Failure::PodFailurePolicy(_) => "PodFailurePolicy",
            Failure::MaxFailedIndexesExceeded => "MaxFailedIndexesExceeded",
            Failure::FailedIndexes => "FailedIndexes",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::BackoffLimitExceeded => "Job has reached the specified backoff limit",
            Failure::DeadlineExceeded => "Job was active longer than specified deadline",
            Failure::PodFailurePolicy(message) => message,
            Failure::MaxFailedIndexesExceeded => {
                "Job has exceeded the specified maximal number of failed indexes"
            }
            Failure::FailedIndexes => "Job has failed indexes",
        }
    }
}

/// Why a Job succeeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Success {
    CompletionsReached,
    /// A rule of the Indexed Job's `successPolicy` is met; upstream's message.
    SuccessPolicy(String),
}

impl Success {
    pub fn reason(&self) -> &'static str {
        match self {
            Success::CompletionsReached => "CompletionsReached",
            Success::SuccessPolicy(_) => "SuccessPolicy",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Success::CompletionsReached => "Reached expected number of succeeded pods",
            Success::SuccessPolicy(message) => message,
        }
    }
}

/// The first rule of an Indexed Job's `successPolicy` that its succeeded indexes meet
/// (upstream `matchSuccessPolicy`): every index of `succeededIndexes`, or
/// `succeededCount` of them, or `succeededCount` indexes of any.
pub fn match_success_policy(
    policy: Option<&SuccessPolicy>,
    completions: i32,
    succeeded: &BTreeSet<i32>,
) -> Option<String> {
    let policy = policy.filter(|_| !succeeded.is_empty())?;
    policy.rules.iter().enumerate().find_map(|(index, rule)| {
        let met = match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(list), count) => {
                // A list that does not parse (validation refuses one) matches nothing.
                let required = parse_index_intervals(list, completions).unwrap_or_default();
                let size: usize = required.iter().map(|(a, b)| (b - a + 1) as usize).sum();
                let done: usize = required
                    .iter()
                    .map(|(a, b)| succeeded.range(a..=b).count())
                    .sum();
                size > 0
                    && match count {
                        Some(n) => done >= usize::try_from(n).unwrap_or(usize::MAX),
                        None => done == size,
                    }
            }
            (None, Some(n)) => succeeded.len() >= usize::try_from(n).unwrap_or(usize::MAX),
            (None, None) => false,
        };
        met.then(|| format!("Matched rules at index {index}"))
    })
}

/// What one sync does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Pods to create: `Some(index)` in Indexed mode.
    pub create: Vec<Option<i32>>,
    /// Active pods to delete, by name.
    pub delete: Vec<String>,
    /// The success criteria are met (`SuccessCriteriaMet`), and why.
    pub succeeded: Option<Success>,
    /// The Job failed (`FailureTarget`).
    pub failed: Option<Failure>,
    /// Reconcile again after this (deadline, back-off).
    pub requeue: Option<Duration>,
}

/// The Job's condition of `type_`, if it is true.
fn true_condition<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

impl Plan {
    /// Reconcile again after `wait` at the latest.
    fn requeue_within(&mut self, wait: Duration) {
        self.requeue = Some(self.requeue.map_or(wait, |r| r.min(wait)));
    }
}

fn condition_true(job: &Job, type_: &str) -> bool {
    true_condition(job, type_).is_some()
}

/// The Job's true `Complete` or `Failed` condition, once it finished (upstream
/// `IsJobFinished` / `getFinishedStatus`).
pub fn finished_condition(job: &Job) -> Option<&JobCondition> {
    true_condition(job, "Complete").or_else(|| true_condition(job, "Failed"))
}

/// The `spec.managedBy` value meaning this controller (upstream
/// `JobControllerName`); no value means it too.
pub const JOB_CONTROLLER_NAME: &str = "kubernetes.io/job-controller";

/// Whether this controller runs the Job: `spec.managedBy` unset or naming it.
pub fn is_managed_by_job_controller(job: &Job) -> bool {
    job.spec
        .as_ref()
        .and_then(|s| s.managed_by.as_deref())
        .is_none_or(|m| m == JOB_CONTROLLER_NAME)
}

/// Whether the Job's selector (never empty: the apiserver generates one) takes `pod`.
fn selects_pod(job: &Job, pod: &Pod) -> bool {
    job.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|sel| !selector_is_empty(sel) && selector_matches(sel, &labels(&pod.metadata)))
}

/// Whether the Job reached `Complete` or `Failed`.
pub fn is_finished(job: &Job) -> bool {
    finished_condition(job).is_some()
}

/// Upstream `syncJob`'s arithmetic for an unfinished Job whose `startTime` is
/// `start`: which pods to create and delete, and whether it succeeded or failed.
pub fn plan(job: &Job, counts: &PodCounts, start: Option<Timestamp>, now: Timestamp) -> Plan {
    let spec = job.spec.clone().unwrap_or_default();
    let mut p = Plan::default();
    let delete_all = |p: &mut Plan| p.delete = counts.active.clone();
    // A decision taken earlier stands: only the remaining pods go.
    if let Some(c) = true_condition(job, "SuccessCriteriaMet") {
        p.succeeded = Some(match c.reason.as_deref() {
            Some("SuccessPolicy") => Success::SuccessPolicy(c.message.clone().unwrap_or_default()),
            _ => Success::CompletionsReached,
        });
        delete_all(&mut p);
        return p;
    }
    if let Some(c) = true_condition(job, "FailureTarget") {
        p.failed = Some(match c.reason.as_deref() {
            Some("DeadlineExceeded") => Failure::DeadlineExceeded,
            Some("PodFailurePolicy") => {
                Failure::PodFailurePolicy(c.message.clone().unwrap_or_default())
            }
            Some("MaxFailedIndexesExceeded") => Failure::MaxFailedIndexesExceeded,
            Some("FailedIndexes") => Failure::FailedIndexes,
            _ => Failure::BackoffLimitExceeded,
        });
        delete_all(&mut p);
        return p;
    }
    if spec.suspend == Some(true) {
        delete_all(&mut p);
        return p;
    }
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let on_failure = spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");
    let failures = counts.failed + if on_failure { counts.restarts } else { 0 };
    let past_backoff = if on_failure {
        failures >= backoff_limit && failures > 0
    } else {
        counts.failed > backoff_limit
    };
    // A FailJob rule decides before the backoff limit, as upstream.
    if let Some(message) = &counts.fail_job {
        p.failed = Some(Failure::PodFailurePolicy(message.clone()));
        delete_all(&mut p);
        return p;
    }
    if past_backoff {
        p.failed = Some(Failure::BackoffLimitExceeded);
        delete_all(&mut p);
        return p;
    }
    if let (Some(deadline), Some(start)) = (spec.active_deadline_seconds, start) {
        let end = start
            .as_millisecond()
            .saturating_add(deadline.saturating_mul(1000));
        let left = end - now.as_millisecond();
        if left <= 0 {
            p.failed = Some(Failure::DeadlineExceeded);
            delete_all(&mut p);
            return p;
        }
        p.requeue = Some(Duration::from_millis(left.unsigned_abs()));
    }
    let per_index = indexed && spec.backoff_limit_per_index.is_some();
    if per_index {
        let failed = counts.failed_indexes.len();
        let settled = failed + counts.succeeded_indexes.len();
        let over_max = spec
            .max_failed_indexes
            .is_some_and(|max| failed > usize::try_from(max).unwrap_or(0));
        let all_settled = failed > 0 && settled >= spec.completions.unwrap_or(0).max(0) as usize;
        if over_max || all_settled {
            p.failed = Some(if over_max {
                Failure::MaxFailedIndexesExceeded
            } else {
                Failure::FailedIndexes
            });
            delete_all(&mut p);
            return p;
        }
    }
    let active = counts.active.len() as i32;
    let completed = match (spec.completions, indexed) {
        (Some(n), false) => counts.succeeded >= n,
        (Some(n), true) => counts.succeeded_indexes.len() as i32 >= n,
        (None, _) => counts.succeeded > 0 && active == 0,
    };
    let by_policy = spec.completions.filter(|_| indexed).and_then(|n| {
        match_success_policy(spec.success_policy.as_ref(), n, &counts.succeeded_indexes)
    });
    p.succeeded = match by_policy {
        Some(message) => Some(Success::SuccessPolicy(message)),
        None => completed.then_some(Success::CompletionsReached),
    };
    if p.succeeded.is_some() {
        delete_all(&mut p);
        return p;
    }
    // How many should run: the parallelism, but no more than the completions missing.
    let wanted = match spec.completions {
        Some(n) => parallelism.min((n - counts.succeeded).max(0)),
        // Work-queue Jobs: once one pod succeeded, no new pods.
        None if counts.succeeded > 0 => active.min(parallelism),
        None => parallelism,
    };
    if active > wanted || !counts.surplus.is_empty() {
        // The Indexed Job's surplus pods go first, then as many more as run beyond
        // what is wanted, in deletion order; creates wait for the next sync (upstream
        // never creates and deletes in one).
        let mut delete = counts.surplus.clone();
        let kept: Vec<&String> = counts
            .active
            .iter()
            .filter(|n| !counts.surplus.contains(n))
            .collect();
        let more = ((active - wanted).max(0) as usize)
            .saturating_sub(delete.len())
            .min(kept.len());
        delete.extend(kept[..more].iter().map(|n| (*n).clone()));
        p.delete = delete;
        return p;
    }
    // `podReplacementPolicy: Failed` (the default with a podFailurePolicy): a pod being
    // deleted is replaced only once it has finished.
    let only_failed = only_replaces_failed(job);
    let terminating = if only_failed { counts.terminating } else { 0 };
    let missing =
        ((wanted - active - terminating).max(0) as usize).min(MAX_POD_CREATE_DELETE_PER_SYNC);
    if missing == 0 {
        return p;
    }
    // Failed pods are replaced only after the back-off since the last failure (per
    // index with `backoffLimitPerIndex`, below).
    if counts.failed > 0
        && !per_index
        && let Some(last) = counts.last_failure
    {
        let wait = backoff_left(counts.failed, last, now);
        if !wait.is_zero() {
            p.requeue_within(wait);
            return p;
        }
    }
    p.create = if indexed {
        let n = spec.completions.unwrap_or(0);
        let pending = (0..n)
            .filter(|i| {
                let taken = counts.succeeded_indexes.contains(i)
                    || counts.failed_indexes.contains(i)
                    || counts.active_indexes.contains(i)
                    || (only_failed && counts.terminating_indexes.contains(i));
                !taken
            })
            .take(missing);
        // An index whose last pod failed runs again after its own back-off; when none
        // is due, the soonest one sets the next sync (upstream
        // `getPodCreationInfoForIndependentIndexes`).
        let mut due = Vec::new();
        for i in pending {
            match counts.index_retries.get(&i).map(|r| r.remaining(now)) {
                Some(wait) if !wait.is_zero() => p.requeue_within(wait),
                _ => due.push(Some(i)),
            }
        }
        due
    } else {
        vec![None; missing]
    };
    p
}

/// A pod for `job` (upstream `GetPodFromTemplate` plus the Indexed additions); with
/// `backoffLimitPerIndex`, it carries its index's failure counts, inherited from
/// `retry`, the index's last failed pod.
pub fn pod_from_template(job: &Job, index: Option<i32>, retry: Option<&IndexRetry>) -> Pod {
    let name = job.metadata.name.clone().unwrap_or_default();
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let tm = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    let mut annotations = tm.annotations.unwrap_or_default();
    let generate_name = match index {
        Some(i) => {
            labels.insert(COMPLETION_INDEX.into(), i.to_string());
            annotations.insert(COMPLETION_INDEX.into(), i.to_string());
            spec.hostname = Some(format!("{name}-{i}"));
            let per_index = job
                .spec
                .as_ref()
                .is_some_and(|s| s.backoff_limit_per_index.is_some());
            if per_index {
                let failures = retry.map_or(0, |r| r.failures);
                annotations.insert(INDEX_FAILURE_COUNT.into(), failures.to_string());
                if let Some(ignored) = retry.map(|r| r.ignored_failures).filter(|n| *n > 0) {
                    annotations.insert(INDEX_IGNORED_FAILURE_COUNT.into(), ignored.to_string());
                }
            }
            let env = EnvVar {
                name: "JOB_COMPLETION_INDEX".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.labels['{COMPLETION_INDEX}']"),
                        api_version: None,
                    }),
                    ..Default::default()
                }),
                value: None,
            };
            for c in spec
                .containers
                .iter_mut()
                .chain(spec.init_containers.iter_mut().flatten())
            {
                c.env.get_or_insert_with(Vec::new).push(env.clone());
            }
            format!("{name}-{i}-")
        }
        None => format!("{name}-"),
    };
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(generate_name),
            namespace: job.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(with_tracking_finalizer(tm.finalizers.unwrap_or_default())),
            owner_references: Some(vec![new_controller_ref(
                "batch/v1",
                "Job",
                &name,
                job.metadata.uid.as_deref().unwrap_or_default(),
            )]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// `conditions` with `type_` set to `status` (the transition time kept when the
/// status does not change, as upstream's `ensureJobConditionStatus`).
fn set_condition(
    conditions: &mut Vec<JobCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status {
            c.status = status.into();
            c.last_transition_time = Some(Time(now));
        }
        c.last_probe_time = Some(Time(now));
        c.reason = Some(reason.into());
        c.message = Some(message.into());
        return;
    }
    conditions.push(JobCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    });
}

fn now_secs() -> u64 {
    Timestamp::now().as_second().max(0) as u64
}

/// The Job controller.
pub struct JobController {
    client: kube::Client,
    jobs: Store<Job>,
    pods: Store<Pod>,
    expectations: Arc<Expectations>,
    /// Per Job key, the UIDs of its pods whose tracking finalizer this controller
    /// removed and the pod cache does not show yet (upstream `finalizerExpectations`):
    /// counted already, they must not be counted again.
    finalizers_going: Arc<parking_lot::Mutex<BTreeMap<String, BTreeSet<String>>>>,
    events: Arc<dyn EventSink>,
}

impl JobController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(JobController {
            client,
            jobs: factory.informer::<Job>().store(),
            pods: factory.informer::<Pod>().store(),
            expectations: Arc::new(Expectations::new()),
            finalizers_going: Default::default(),
            events,
        })
    }

    /// The key of the pod's controlling Job, if it is cached and the same object.
    fn owner_key(jobs: &Store<Job>, pod: &Pod) -> Option<String> {
        let r = controller_of(&pod.metadata)?;
        if r.kind != "Job" || !r.api_version.starts_with("batch/") {
            return None;
        }
        let job = jobs.get_by_name(pod.metadata.namespace.as_deref(), &r.name)?;
        (job.metadata.uid.as_deref() == Some(r.uid.as_str())).then(|| object_key(&*job))
    }

    async fn create_pods(
        &self,
        job: &Job,
        key: &str,
        indexes: &[Option<i32>],
        retries: &BTreeMap<i32, IndexRetry>,
    ) -> Result<()> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        self.expectations
            .expect_creations(key, indexes.len(), now_secs());
        let next = parking_lot::Mutex::new(indexes.iter());
        let owner = reference_to(job);
        let (_, err) = slow_start_batch(indexes.len(), 1, || {
            let index = next.lock().next().copied().flatten();
            let api = api.clone();
            let owner = &owner;
            async move {
                let pod = pod_from_template(job, index, index.and_then(|i| retries.get(&i)));
                let created = create_pod(&api, &pod, &*self.events, owner).await;
                if created.is_err() {
                    self.expectations.creation_observed(key);
                }
                created.map(|_| ())
            }
        })
        .await;
        // Creates a batch that stopped early never issued are not expected either.
        let skipped = next.lock().len();
        for _ in 0..skipped {
            self.expectations.creation_observed(key);
        }
        err.map_or(Ok(()), |e| Err(e.into()))
    }

    async fn delete_pods(&self, job: &Job, key: &str, names: &[String]) -> Result<()> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let pods: Vec<Arc<Pod>> = names
            .iter()
            .filter_map(|n| self.pods.get_by_name(Some(ns), n))
            .collect();
        let uids: Vec<(String, String)> = pods
            .iter()
            .map(|p| {
                let name = p.metadata.name.clone().unwrap_or_default();
                (name, p.metadata.uid.clone().unwrap_or_default())
            })
            .collect();
        let expected: Vec<String> = uids.iter().map(|(_, u)| u.clone()).collect();
        self.expectations
            .expect_deletions(key, &expected, now_secs());
        let owner = reference_to(job);
        let mut first_error = None;
        for ((name, uid), pod) in uids.iter().zip(&pods) {
            // A pod this controller deletes is not a failure: its finalizer goes first
            // (upstream `deleteJobPods`), so it is never counted.
            if has_tracking_finalizer(pod)
                && let Err(e) = remove_tracking_finalizer(&api, name).await
            {
                self.expectations.deletion_observed(key, uid);
                first_error.get_or_insert(e);
                continue;
            }
            if let Err(e) = delete_pod(&api, name, &*self.events, &owner).await {
                self.expectations.deletion_observed(key, uid);
                if !is_not_found(&e) && first_error.is_none() {
                    first_error = Some(e);
                }
            }
        }
        first_error.map_or(Ok(()), |e| Err(e.into()))
    }

    /// The Job's pods (upstream `getPodsForJob`): its own by controllerRef, orphans its
    /// selector matches adopted, and its pods the selector no longer matches released.
    async fn claim_pods(&self, job: &Job) -> Result<Vec<Arc<Pod>>> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let owner = ClaimingOwner {
            api_version: "batch/v1",
            kind: "Job",
            namespace: ns,
            name: job.metadata.name.as_deref().unwrap_or_default(),
            uid: job.metadata.uid.as_deref().unwrap_or_default(),
            deleting: job.metadata.deletion_timestamp.is_some(),
            adopt_finalizers: &[JOB_TRACKING_FINALIZER],
        };
        let selects = |p: &Pod| selects_pod(job, p);
        claim_pods::<Job>(&self.client, owner, self.pods.list_namespace(ns), selects).await
    }

    /// Writes `status` against the version the sync read; the Job as written (`None`
    /// once it is gone). As upstream's `updateJobStatus`, a conflict is not retried on a
    /// fresh copy: a sync that worked from a stale Job must not overwrite what a newer
    /// one wrote (its counts, its finish), so it fails and the Job is synced again.
    async fn write_status(&self, job: &Job, status: JobStatus) -> Result<Option<Job>> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        let mut job = job.clone();
        job.status = Some(status);
        let name = job.metadata.name.clone().unwrap_or_default();
        match api
            .replace_status(&name, &PostParams::default(), &job)
            .await
        {
            Ok(written) => Ok(Some(written)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes the tracking finalizer from `pods` (upstream
    /// `removeTrackingFinalizerFromPods`), expecting each removal until the pod cache
    /// shows it. Returns the UIDs whose finalizer is gone (a pod already deleted
    /// counts as gone).
    async fn release_pods(&self, key: &str, job: &Job, pods: &[&TrackedPod]) -> BTreeSet<String> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        self.finalizers_going
            .lock()
            .entry(key.to_string())
            .or_default()
            .extend(pods.iter().map(|pod| pod.uid.clone()));
        let removals = pods.iter().map(|pod| async {
            match remove_tracking_finalizer(&api, &pod.name).await {
                Ok(()) => Some(pod.uid.clone()),
                Err(e) => {
                    tracing::warn!(job = key, pod = %pod.name, "removing the tracking finalizer: {e}");
                    removal_seen(&self.finalizers_going, key, &pod.uid);
                    None
                }
            }
        });
        futures::future::join_all(removals)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// The Job's expected finalizer removals still pending: a pod the cache shows
    /// without the finalizer, or no longer has, is done.
    fn finalizers_going_for(&self, key: &str, pods: &[&Pod]) -> BTreeSet<String> {
        let mut going = self.finalizers_going.lock();
        let Some(uids) = going.get_mut(key) else {
            return BTreeSet::new();
        };
        uids.retain(|uid| {
            pods.iter()
                .any(|p| p.metadata.uid.as_deref() == Some(uid) && has_tracking_finalizer(p))
        });
        let pending = uids.clone();
        if uids.is_empty() {
            going.remove(key);
        }
        pending
    }

    /// The tracking finalizers of a finished or deleted Job's pods, or of a pod no Job
    /// runs any more (upstream `syncOrphanPod`): nothing is left to count, so they go.
    async fn release_orphan(&self, pod_key: &str) -> Result<Action> {
        let Some(pod) = self.pods.get(pod_key) else {
            return Ok(Action::Done);
        };
        if !has_tracking_finalizer(&pod) {
            return Ok(Action::Done);
        }
        if let Some(r) = controller_of(&pod.metadata) {
            if r.kind != "Job" || r.api_version != "batch/v1" {
                return Ok(Action::Done);
            }
            let ns = pod.metadata.namespace.as_deref();
            if let Some(job) = self.jobs.get_by_name(ns, &r.name)
                && job.metadata.uid.as_deref() == Some(r.uid.as_str())
                && (!is_managed_by_job_controller(&job)
                    || !(is_finished(&job) || job.metadata.deletion_timestamp.is_some()))
            {
                // Its Job counts it, or another controller manages that Job.
                return Ok(Action::Done);
            }
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        remove_tracking_finalizer(&api, pod.metadata.name.as_deref().unwrap_or_default()).await?;
        Ok(Action::Done)
    }
}

#[async_trait::async_trait]
impl Controller for JobController {
    fn name(&self) -> &'static str {
        "job"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        let exp = self.expectations.clone();
        let pods = self.pods.clone();
        factory.informer::<Job>().add_event_handler(
            move |n: Notification<Job>| {
                let job = n.object();
                let key = object_key(&**job);
                if let Notification::Deleted { .. } = n {
                    exp.delete(&key);
                    // Its pods still holding the tracking finalizer let go (upstream
                    // `cleanupPodFinalizers`).
                    for pod in held_pods(&pods, job) {
                        q.add(format!("{ORPHAN_POD_KEY}{}", object_key(&*pod)));
                    }
                    return;
                }
                q.add(key);
            },
            None,
        );
        let q = queue.clone();
        let exp = self.expectations.clone();
        let going = self.finalizers_going.clone();
        let jobs = self.jobs.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| {
                let pod = n.object();
                let Some(key) = Self::owner_key(&jobs, pod) else {
                    // No Job of ours runs it: a tracking finalizer left has to go.
                    if has_tracking_finalizer(pod)
                        && controller_of(&pod.metadata)
                            .is_none_or(|r| r.kind == "Job" && r.api_version == "batch/v1")
                    {
                        q.add(format!("{ORPHAN_POD_KEY}{}", object_key(&**pod)));
                    }
                    // An orphan: every Job whose selector takes it may adopt it.
                    if controller_of(&pod.metadata).is_none()
                        && pod.metadata.deletion_timestamp.is_none()
                    {
                        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
                        for job in jobs.list_namespace(ns) {
                            if selects_pod(&job, pod) {
                                q.add(object_key(&*job));
                            }
                        }
                    }
                    return;
                };
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                if matches!(n, Notification::Deleted { .. }) || !has_tracking_finalizer(pod) {
                    removal_seen(&going, &key, uid);
                }
                match &n {
                    Notification::Added { obj, .. }
                        if obj.metadata.deletion_timestamp.is_none() =>
                    {
                        exp.creation_observed(&key)
                    }
                    Notification::Updated { old, new } => {
                        if old.metadata.resource_version == new.metadata.resource_version {
                            return;
                        }
                        if new.metadata.deletion_timestamp.is_some() {
                            exp.deletion_observed(&key, uid);
                        }
                    }
                    _ => exp.deletion_observed(&key, uid),
                }
                q.add(key);
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        if let Some(pod_key) = key.strip_prefix(ORPHAN_POD_KEY) {
            return self.release_orphan(pod_key).await;
        }
        if split_key(key).0.is_none() {
            return Err(Error::Invalid(format!("key {key:?} has no namespace")));
        }
        let Some(job) = self.jobs.get(key) else {
            self.expectations.delete(key);
            self.finalizers_going.lock().remove(key);
            return Ok(Action::Done);
        };
        if !is_managed_by_job_controller(&job) {
            // Another controller (named in spec.managedBy) runs this Job's pods and
            // writes its status; upstream's controller leaves it alone.
            return Ok(Action::Done);
        }
        if is_finished(&job) || job.metadata.deletion_timestamp.is_some() {
            // Nothing more to count: pods still holding the finalizer let go.
            let held: Vec<TrackedPod> = held_pods(&self.pods, &job)
                .into_iter()
                .map(|p| TrackedPod {
                    name: p.metadata.name.clone().unwrap_or_default(),
                    uid: p.metadata.uid.clone().unwrap_or_default(),
                    finished: true,
                    succeeded: pod_phase(&p) == "Succeeded",
                })
                .collect();
            self.release_pods(key, &job, &held.iter().collect::<Vec<_>>())
                .await;
            return Ok(Action::Done);
        }
        let pods = self.claim_pods(&job).await?;
        let owned: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
        let spec = job.spec.clone().unwrap_or_default();
        let indexed = spec.completion_mode.as_deref() == Some("Indexed");
        let now = Timestamp::now();
        let going = self.finalizers_going_for(key, &owned);
        let counts = count_pods_expecting(&job, &owned, now, &going);
        let old = job.status.clone().unwrap_or_default();
        // The events of a finish this sync records, sent once its status is written.
        let mut finish_events: Vec<(EventType, &str, String)> = Vec::new();
        let mut status = old.clone();
        let mut conditions = old.conditions.clone().unwrap_or_default();
        let suspended = spec.suspend == Some(true);

        // Suspension and resumption (upstream resets startTime on resume).
        let was_suspended = condition_true(&job, "Suspended");
        if suspended && !was_suspended {
            set_condition(
                &mut conditions,
                "Suspended",
                "True",
                "JobSuspended",
                "Job suspended",
                now,
            );
            emit(
                &*self.events,
                &*job,
                EventType::Normal,
                "Suspended",
                "Job suspended".into(),
            );
        } else if !suspended && was_suspended {
            set_condition(
                &mut conditions,
                "Suspended",
                "False",
                "JobResumed",
                "Job resumed",
                now,
            );
            emit(
                &*self.events,
                &*job,
                EventType::Normal,
                "Resumed",
                "Job resumed".into(),
            );
            status.start_time = Some(Time(now));
        }
        if status.start_time.is_none() && !suspended {
            status.start_time = Some(Time(now));
        }

        let plan = plan(&job, &counts, status.start_time.as_ref().map(|t| t.0), now);
        let mut sync_error = None;
        if self.expectations.satisfied(key, now_secs()) {
            if !plan.delete.is_empty() {
                sync_error = self.delete_pods(&job, key, &plan.delete).await.err();
            } else if !plan.create.is_empty() {
                sync_error = self
                    .create_pods(&job, key, &plan.create, &counts.index_retries)
                    .await
                    .err();
            }
        }

        // Pods just deleted are terminating, not active; new ones are active.
        let deleting = plan.delete.len() as i32;
        let active = counts.active.len() as i32 - deleting
            + if sync_error.is_none() {
                plan.create.len() as i32
            } else {
                0
            };
        status.active = omitempty(active.max(0));
        status.ready = Some(counts.ready.min(active.max(0)));
        status.terminating = Some(counts.terminating + deleting);
        // Upstream's tracking: finished pods are recorded in uncountedTerminatedPods
        // first, then lose their finalizer, and only then move into the counters.
        // Indexed Jobs count succeeded pods by index, so only failures go by UID.
        let finishing = plan.succeeded.is_some() || plan.failed.is_some();
        let old_uncounted = old.uncounted_terminated_pods.clone().unwrap_or_default();
        let (release, reached_max_uncounted) = within_uncounted_cap(
            counts.tracked.iter().filter(|t| t.finished || finishing),
            &uid_set(old_uncounted.succeeded.as_ref()),
            &uid_set(old_uncounted.failed.as_ref()),
            MAX_UNCOUNTED_PODS,
        );
        let released = |uid: &String| release.iter().any(|t| &t.uid == uid);
        let mut uncounted_succeeded = old_uncounted.succeeded.unwrap_or_default();
        let mut uncounted_failed = old_uncounted.failed.unwrap_or_default();
        uncounted_succeeded.extend(counts.new_succeeded.iter().filter(|u| released(u)).cloned());
        uncounted_failed.extend(counts.new_failed.iter().filter(|u| released(u)).cloned());
        if plan.failed.is_some() {
            // A failing Job's pods that had not finished count as failed (upstream).
            for t in release.iter().filter(|t| !t.finished && !t.succeeded) {
                if !uncounted_failed.contains(&t.uid) && !uncounted_succeeded.contains(&t.uid) {
                    uncounted_failed.push(t.uid.clone());
                }
            }
        }
        status.succeeded = omitempty(if indexed {
            counts.succeeded
        } else {
            old.succeeded.unwrap_or(0)
        });
        status.failed = omitempty(old.failed.unwrap_or(0));
        status.uncounted_terminated_pods =
            Some(uncounted_pods(&uncounted_succeeded, &uncounted_failed));
        if indexed {
            let done = format_indexes(&counts.succeeded_indexes);
            status.completed_indexes = (!done.is_empty()).then_some(done);
            if spec.backoff_limit_per_index.is_some() {
                status.failed_indexes = Some(format_indexes(&counts.failed_indexes));
            }
        }

        // Flush the UIDs before any finalizer goes: a pod without it is never
        // counted again, so its count must be in the status first.
        let mut written = None;
        if !release.is_empty() && status != old {
            written = self.write_status(&job, status.clone()).await?;
        }
        let gone = self.release_pods(key, &job, &release).await;
        let still_tracked =
            |uid: &String| counts.tracked.iter().any(|t| &t.uid == uid) && !gone.contains(uid);
        let (left_succeeded, counted_succeeded): (Vec<String>, Vec<String>) =
            uncounted_succeeded.into_iter().partition(still_tracked);
        let (left_failed, counted_failed): (Vec<String>, Vec<String>) =
            uncounted_failed.into_iter().partition(still_tracked);
        if !indexed {
            status.succeeded =
                omitempty(old.succeeded.unwrap_or(0) + counted_succeeded.len() as i32);
        }
        status.failed = omitempty(old.failed.unwrap_or(0) + counted_failed.len() as i32);
        status.uncounted_terminated_pods = Some(uncounted_pods(&left_succeeded, &left_failed));
        let all_counted = left_succeeded.is_empty() && left_failed.is_empty();

        // Pods left out by the cap are counted in a later sync; the Job waits for them.
        let none_running = active <= 0
            && counts.terminating + deleting == 0
            && all_counted
            && !reached_max_uncounted;
        if let Some(success) = &plan.succeeded {
            set_condition(
                &mut conditions,
                "SuccessCriteriaMet",
                "True",
                success.reason(),
                success.message(),
                now,
            );
            if none_running {
                set_condition(
                    &mut conditions,
                    "Complete",
                    "True",
                    success.reason(),
                    success.message(),
                    now,
                );
                status.completion_time = Some(Time(now));
                if !condition_true(&job, "Complete") {
                    finish_events.push((EventType::Normal, "Completed", "Job completed".into()));
                }
            }
        }
        if let Some(f) = &plan.failed {
            if !condition_true(&job, "FailureTarget") {
                finish_events.push((EventType::Warning, f.reason(), f.message().into()));
            }
            set_condition(
                &mut conditions,
                "FailureTarget",
                "True",
                f.reason(),
                f.message(),
                now,
            );
            if none_running {
                set_condition(
                    &mut conditions,
                    "Failed",
                    "True",
                    f.reason(),
                    f.message(),
                    now,
                );
            }
        }
        status.conditions = (!conditions.is_empty()).then_some(conditions);
        match written {
            Some(latest) if latest.status.as_ref() != Some(&status) => {
                self.write_status(&latest, status).await?;
            }
            Some(_) => {}
            None if status != old => {
                self.write_status(&job, status).await?;
            }
            None => {}
        }
        // Once the status that records the finish is stored (upstream's
        // recordJobFinished after the update): a sync from a stale copy fails its
        // write above and reports nothing.
        for (type_, reason, note) in finish_events {
            emit(&*self.events, &*job, type_, reason, note);
        }
        if let Some(e) = sync_error {
            return Err(e);
        }
        Ok(match plan.requeue {
            _ if reached_max_uncounted => Action::RequeueAfter(Duration::ZERO),
            Some(d) => Action::RequeueAfter(d),
            None => Action::Done,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn job(spec: serde_json::Value) -> Job {
        let mut v = json!({"metadata": {"name": "j", "namespace": "ns", "uid": "u1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                     "containers": [{"name": "c", "image": "busybox"}]}}}});
        for (k, val) in spec.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, phase: &str, index: Option<i32>) -> Pod {
        // Pods of this controller carry the tracking finalizer until counted.
        let mut v = json!({"metadata": {"name": name, "namespace": "ns",
                           "uid": format!("uid-{name}"),
                           "finalizers": [JOB_TRACKING_FINALIZER],
                           "creationTimestamp": "2020-01-01T00:00:00Z"},
                           "status": {"phase": phase}});
        if let Some(i) = index {
            v["metadata"]["annotations"] = json!({COMPLETION_INDEX: i.to_string()});
        }
        serde_json::from_value(v).unwrap()
    }

    fn counts(pods: &[Pod], indexed: bool, completions: Option<i32>) -> PodCounts {
        let mode = if indexed { "Indexed" } else { "NonIndexed" };
        counts_for(
            &job(json!({"completionMode": mode, "completions": completions})),
            pods,
        )
    }

    fn counts_for(job: &Job, pods: &[Pod]) -> PodCounts {
        count_pods(job, &pods.iter().collect::<Vec<_>>(), ts(0))
    }

    /// A failed pod whose containers (`main`, then the init container `init`) exited
    /// with these codes, with these pod conditions.
    fn failed_pod(name: &str, main: i32, init: Option<i32>, conditions: &[&str]) -> Pod {
        let term = |n: &str, code: i32| {
            json!({"name": n, "ready": false, "restartCount": 0,
            "image": "busybox", "imageID": "",
            "state": {"terminated": {"exitCode": code}}})
        };
        let mut p = pod(name, "Failed", None);
        let status = json!({"phase": "Failed",
            "containerStatuses": [term("main", main)],
            "initContainerStatuses": init.map(|c| vec![term("init", c)]).unwrap_or_default(),
            "conditions": conditions.iter().map(|t| json!({"type": t, "status": "True"}))
                .collect::<Vec<_>>()});
        p.status = Some(serde_json::from_value(status).unwrap());
        p
    }

    fn policy(rules: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({ "rules": rules })).unwrap()
    }

    #[test]
    fn pod_failure_policy_rules_match_in_order() {
        let rules = policy(json!([
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}},
        ]));
        let m = |p: &Pod| match_pod_failure_policy(Some(&rules), p);
        assert_eq!(
            m(&failed_pod("a", 42, None, &["DisruptionTarget"])),
            PolicyMatch::Ignore
        );
        assert_eq!(
            m(&failed_pod("a", 42, None, &[])),
            PolicyMatch::FailJob(
                "Container main for pod ns/a failed with exit code 42 matching FailJob rule at index 1"
                    .into()
            )
        );
        assert_eq!(m(&failed_pod("a", 7, None, &[])), PolicyMatch::Count);
        // The init container's code is looked at after the containers'.
        assert_eq!(
            m(&failed_pod("a", 2, Some(1), &[])),
            PolicyMatch::FailJob(
                "Container main for pod ns/a failed with exit code 2 matching FailJob rule at index 3"
                    .replace("main", "init")
                    .replace("code 2", "code 1")
            )
        );
        // A zero exit code never matches, even for NotIn.
        assert_eq!(m(&failed_pod("a", 0, None, &[])), PolicyMatch::Count);
        assert_eq!(
            match_pod_failure_policy(None, &failed_pod("a", 42, None, &[])),
            PolicyMatch::Count
        );
        let on_condition = policy(json!([
            {"action": "FailJob", "onPodConditions": [{"type": "ConfigIssue", "status": "True"}]},
        ]));
        assert_eq!(
            match_pod_failure_policy(
                Some(&on_condition),
                &failed_pod("b", 1, None, &["ConfigIssue"])
            ),
            PolicyMatch::FailJob(
                "Pod ns/b has condition ConfigIssue matching FailJob rule at index 0".into()
            )
        );
    }

    #[test]
    fn a_fail_job_rule_fails_the_job_before_the_backoff_limit() {
        let rules = policy(json!([
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}},
        ]));
        let spec = json!({"completions": 2, "parallelism": 2, "backoffLimit": 6,
            "podFailurePolicy": rules});
        let pods = [failed_pod("f", 42, None, &[]), pod("r", "Running", None)];
        let c = counts_for(&job(spec.clone()), &pods);
        assert_eq!(c.failed, 1);
        let p = plan(&job(spec.clone()), &c, Some(ts(0)), ts(1));
        let message =
            "Container main for pod ns/f failed with exit code 42 matching FailJob rule at index 0";
        assert_eq!(p.failed, Some(Failure::PodFailurePolicy(message.into())));
        assert_eq!(p.failed.as_ref().unwrap().reason(), "PodFailurePolicy");
        assert_eq!(p.delete, vec!["r".to_string()]);
        // Once recorded as the FailureTarget, the decision and its message stand.
        let mut decided = job(spec.clone());
        decided.status = Some(
            serde_json::from_value(json!({"conditions": [{"type": "FailureTarget",
            "status": "True", "reason": "PodFailurePolicy", "message": message}]}))
            .unwrap(),
        );
        let p = plan(
            &decided,
            &counts(&pods[1..], false, Some(2)),
            Some(ts(0)),
            ts(2),
        );
        assert_eq!(p.failed, Some(Failure::PodFailurePolicy(message.into())));
        // Ignored failures are not counted: with backoffLimit 0 the Job goes on.
        let ignored = [failed_pod("i", 137, None, &[])];
        let spec = json!({"completions": 1, "backoffLimit": 0, "podFailurePolicy": rules});
        let c = counts_for(&job(spec.clone()), &ignored);
        assert_eq!((c.failed, c.last_failure), (0, None));
        let p = plan(&job(spec), &c, Some(ts(0)), ts(1));
        assert_eq!((p.failed, p.create.len()), (None, 1));
    }

    #[test]
    fn a_success_policy_rule_completes_an_indexed_job_early() {
        let spec = json!({"completions": 5, "parallelism": 5, "completionMode": "Indexed",
            "successPolicy": {"rules": [
                {"succeededIndexes": "0-1"},
                {"succeededIndexes": "2-4", "succeededCount": 2},
                {"succeededCount": 4}]}});
        let run = |done: &[i32]| {
            let pods: Vec<Pod> = (0..5)
                .map(|i| {
                    let phase = if done.contains(&i) {
                        "Succeeded"
                    } else {
                        "Running"
                    };
                    pod(&format!("p{i}"), phase, Some(i))
                })
                .collect();
            plan(
                &job(spec.clone()),
                &counts(&pods, true, Some(5)),
                Some(ts(0)),
                ts(1),
            )
        };
        assert_eq!(run(&[0, 2]).succeeded, None);
        let p = run(&[0, 1]);
        assert_eq!(
            p.succeeded,
            Some(Success::SuccessPolicy("Matched rules at index 0".into()))
        );
        assert_eq!(p.succeeded.as_ref().unwrap().reason(), "SuccessPolicy");
        // The indexes still running are stopped.
        assert_eq!(p.delete, vec!["p2", "p3", "p4"]);
        assert_eq!(
            run(&[3, 4]).succeeded,
            Some(Success::SuccessPolicy("Matched rules at index 1".into()))
        );
        // Without a policy only all five would do.
        let plain = json!({"completions": 5, "parallelism": 5, "completionMode": "Indexed"});
        let pods: Vec<Pod> = (0..5)
            .map(|i| pod(&format!("p{i}"), "Succeeded", Some(i)))
            .collect();
        let c = counts(&pods[..4], true, Some(5));
        assert_eq!(plan(&job(plain), &c, Some(ts(0)), ts(1)).succeeded, None);
        assert_eq!(
            match_success_policy(
                job(spec).spec.unwrap().success_policy.as_ref(),
                5,
                &[0, 2, 3, 4].into()
            ),
            Some("Matched rules at index 1".into())
        );
    }

    #[test]
    fn with_pod_replacement_policy_failed_a_terminating_pod_is_not_replaced_yet() {
        let mut going = pod("t", "Running", Some(0));
        going.metadata.deletion_timestamp = Some(Time(ts(0)));
        let c = counts(std::slice::from_ref(&going), true, Some(2));
        let indexed = |policy: &str| {
            job(
                json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed",
                "podReplacementPolicy": policy}),
            )
        };
        let p = plan(&indexed("Failed"), &c, Some(ts(0)), ts(1));
        assert_eq!(p.create, vec![Some(1)]);
        let p = plan(&indexed("TerminatingOrFailed"), &c, Some(ts(0)), ts(1));
        assert_eq!(p.create, vec![Some(0), Some(1)]);
    }

    /// A Job with these status counters and `uncountedTerminatedPods`.
    fn job_with_status(spec: serde_json::Value, status: serde_json::Value) -> Job {
        let mut j = job(spec);
        j.status = Some(serde_json::from_value(status).unwrap());
        j
    }

    fn untracked(mut p: Pod) -> Pod {
        p.metadata.finalizers = None;
        p
    }

    #[test]
    fn counts_add_only_pods_the_status_does_not_hold_yet() {
        let j = job_with_status(
            json!({"completions": 5}),
            json!({"succeeded": 2, "failed": 1,
                   "uncountedTerminatedPods": {"succeeded": ["uid-b"], "failed": ["uid-x"]}}),
        );
        let pods = [
            // Counted before: its finalizer is gone.
            untracked(pod("a", "Succeeded", None)),
            // Recorded by UID, not yet in the counters.
            pod("b", "Succeeded", None),
            pod("x", "Failed", None),
            // New.
            pod("c", "Succeeded", None),
            pod("y", "Failed", None),
        ];
        let c = counts_for(&j, &pods);
        assert_eq!((c.succeeded, c.failed), (2 + 1 + 1, 1 + 1 + 1));
        assert_eq!(c.new_succeeded, vec!["uid-c".to_string()]);
        assert_eq!(c.new_failed, vec!["uid-y".to_string()]);
        // Every finished pod still holding the finalizer may let go of it.
        let tracked: Vec<_> = c
            .tracked
            .iter()
            .map(|t| (t.name.as_str(), t.finished))
            .collect();
        assert_eq!(
            tracked,
            [("b", true), ("x", true), ("c", true), ("y", true)]
        );
        // Pods the cache no longer has stay counted through the status.
        let c = counts_for(&j, &[]);
        assert_eq!((c.succeeded, c.failed), (3, 2));
    }

    #[test]
    fn a_pod_whose_finalizer_is_going_is_not_counted_twice() {
        let j = job_with_status(json!({"completions": 3}), json!({"succeeded": 1}));
        let pods = [pod("a", "Succeeded", None)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let going = BTreeSet::from(["uid-a".to_string()]);
        let c = count_pods_expecting(&j, &refs, ts(0), &going);
        assert_eq!(c.succeeded, 1);
        assert!(c.new_succeeded.is_empty() && c.tracked.is_empty());
    }

    #[test]
    fn a_pod_deleted_while_running_counts_as_failed_unless_only_failed_pods_are_replaced() {
        let mut deleted = pod("d", "Running", None);
        deleted.metadata.deletion_timestamp = Some(Time(ts(0)));
        let c = counts_for(&job(json!({})), std::slice::from_ref(&deleted));
        assert_eq!((c.failed, c.terminating), (1, 1));
        assert_eq!(c.new_failed, vec!["uid-d".to_string()]);
        assert!(c.tracked[0].finished);
        let c = counts_for(
            &job(json!({"podReplacementPolicy": "Failed"})),
            std::slice::from_ref(&deleted),
        );
        assert_eq!((c.failed, c.terminating), (0, 1));
        assert!(!c.tracked[0].finished);
    }

    #[test]
    fn a_pod_whose_deletion_was_finished_counts_as_failed_when_only_failed_pods_are_replaced() {
        let mut stopped = pod("s", "Running", None);
        stopped.metadata.deletion_timestamp = Some(Time(ts(0)));
        stopped.metadata.deletion_grace_period_seconds = Some(30);
        let j = job(json!({"podReplacementPolicy": "Failed"}));
        let c = counts_for(&j, std::slice::from_ref(&stopped));
        assert_eq!((c.failed, c.terminating), (0, 1));
        // The last delete (grace 0): its containers are stopped.
        stopped.metadata.deletion_grace_period_seconds = Some(0);
        let c = counts_for(&j, std::slice::from_ref(&stopped));
        assert_eq!((c.failed, c.terminating), (1, 0));
        assert!(c.tracked[0].finished);
    }

    #[test]
    fn completed_indexes_in_the_status_stay_completed_without_their_pods() {
        let j = job_with_status(
            json!({"completions": 4, "completionMode": "Indexed"}),
            json!({"succeeded": 2, "completedIndexes": "0,2"}),
        );
        let c = counts_for(&j, &[pod("p3", "Succeeded", Some(3))]);
        assert_eq!(c.succeeded_indexes, [0, 2, 3].into());
        assert_eq!(c.succeeded, 3);
        // Indexed Jobs count by index, not by UID.
        assert!(c.new_succeeded.is_empty());
    }

    #[test]
    fn the_last_failed_pod_of_an_index_to_retry_keeps_its_finalizer() {
        let j = job(json!({"completions": 2, "completionMode": "Indexed",
                            "backoffLimitPerIndex": 2}));
        let c = counts_for(&j, &[failed_at_index("f", 1, 3, 0, 5)]);
        assert!(c.index_retries.contains_key(&1));
        assert_eq!(c.new_failed, vec!["uid-f".to_string()]);
        assert!(!c.tracked[0].finished);
    }

    #[test]
    fn pods_from_the_template_carry_the_tracking_finalizer_once() {
        let mut j = job(json!({}));
        j.spec.as_mut().unwrap().template.metadata = Some(ObjectMeta {
            finalizers: Some(vec![
                "example.com/keep".into(),
                JOB_TRACKING_FINALIZER.into(),
            ]),
            ..Default::default()
        });
        let p = pod_from_template(&j, None, None);
        assert_eq!(
            p.metadata.finalizers,
            Some(vec![
                "example.com/keep".to_string(),
                JOB_TRACKING_FINALIZER.to_string()
            ])
        );
        let p = pod_from_template(&job(json!({})), None, None);
        assert_eq!(
            p.metadata.finalizers,
            Some(vec![JOB_TRACKING_FINALIZER.to_string()])
        );
    }

    /// A failed pod of `index` that exited with `code` at `finished`, its index having
    /// failed `failures` times before.
    fn failed_at_index(name: &str, index: i32, code: i32, failures: i32, finished: i64) -> Pod {
        let mut p = failed_pod(name, code, None, &[]);
        p.metadata.annotations = Some(
            [
                (COMPLETION_INDEX.to_string(), index.to_string()),
                (INDEX_FAILURE_COUNT.to_string(), failures.to_string()),
            ]
            .into(),
        );
        p.metadata.creation_timestamp = Some(Time(ts(finished)));
        p
    }

    #[test]
    fn backoff_limit_per_index_retries_each_index_on_its_own() {
        let spec = json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed",
            "backoffLimitPerIndex": 1, "backoffLimit": 2147483647});
        let pods = [
            failed_at_index("a", 0, 1, 0, 100),
            failed_at_index("b", 1, 1, 0, 50),
            failed_at_index("c", 1, 1, 1, 90),
            pod("d", "Running", Some(2)),
        ];
        let j = job(spec.clone());
        let c = counts_for(&j, &pods);
        // Index 1 failed twice, past its limit of one retry; index 0 failed once.
        assert_eq!(c.failed_indexes, [1].into());
        assert_eq!(c.failed, 3);
        let retry = IndexRetry {
            failures: 1,
            ignored_failures: 0,
            finished: Some(ts(100)),
        };
        assert_eq!(c.index_retries, [(0, retry)].into());
        // Index 0 waits for its own back-off (10 s after one failure), not the Job's.
        let p = plan(&j, &c, Some(ts(0)), ts(104));
        assert_eq!((p.create.clone(), p.failed.clone()), (vec![], None));
        assert_eq!(p.requeue, Some(Duration::from_secs(6)));
        let p = plan(&j, &c, Some(ts(0)), ts(110));
        assert_eq!(p.create, vec![Some(0)]);
        // Its next pod carries the index's failure count.
        let next = pod_from_template(&j, Some(0), c.index_retries.get(&0));
        let annotations = next.metadata.annotations.unwrap();
        assert_eq!(annotations[INDEX_FAILURE_COUNT], "1");
        assert!(!annotations.contains_key(INDEX_IGNORED_FAILURE_COUNT));
        let first = pod_from_template(&j, Some(2), None);
        assert_eq!(
            first.metadata.annotations.unwrap()[INDEX_FAILURE_COUNT],
            "0"
        );
        // Once every index succeeded or failed, the Job fails with FailedIndexes.
        let settled = [
            pods[1].clone(),
            pods[2].clone(),
            pod("s0", "Succeeded", Some(0)),
            pod("s2", "Succeeded", Some(2)),
        ];
        let p = plan(&j, &counts_for(&j, &settled), Some(ts(0)), ts(200));
        assert_eq!(p.failed, Some(Failure::FailedIndexes));
        assert_eq!(p.failed.unwrap().message(), "Job has failed indexes");
        // An index recorded as failed stays failed when its pods are gone.
        let mut recorded = job(spec);
        recorded.status = Some(serde_json::from_value(json!({"failedIndexes": "1"})).unwrap());
        let c = counts_for(&recorded, &[pod("d", "Running", Some(2))]);
        assert_eq!(c.failed_indexes, [1].into());
        assert_eq!(
            plan(&recorded, &c, Some(ts(0)), ts(1)).create,
            vec![Some(0)]
        );
    }

    #[test]
    fn fail_index_rules_and_max_failed_indexes() {
        let spec = json!({"completions": 4, "parallelism": 4, "completionMode": "Indexed",
            "backoffLimitPerIndex": 3, "maxFailedIndexes": 1, "backoffLimit": 2147483647,
            "podFailurePolicy": {"rules": [
                {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [42]}},
                {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}}]}});
        let j = job(spec);
        // FailIndex fails the index at its first failure; an ignored failure is
        // counted apart and does not count against the index.
        let pods = [
            failed_at_index("a", 0, 42, 0, 10),
            failed_at_index("b", 1, 137, 0, 10),
            pod("c", "Running", Some(2)),
            pod("d", "Running", Some(3)),
        ];
        let c = counts_for(&j, &pods);
        assert_eq!(c.failed_indexes, [0].into());
        assert_eq!(c.failed, 1);
        assert_eq!(
            c.index_retries[&1],
            IndexRetry {
                failures: 0,
                ignored_failures: 1,
                finished: Some(ts(10)),
            }
        );
        let p = plan(&j, &c, Some(ts(0)), ts(30));
        assert_eq!((p.failed, p.create), (None, vec![Some(1)]));
        let annotations = pod_from_template(&j, Some(1), c.index_retries.get(&1))
            .metadata
            .annotations
            .unwrap();
        assert_eq!(
            (
                annotations[INDEX_FAILURE_COUNT].as_str(),
                annotations[INDEX_IGNORED_FAILURE_COUNT].as_str()
            ),
            ("0", "1")
        );
        // A second failed index is one more than maxFailedIndexes allows.
        let mut more = pods.to_vec();
        more[2] = failed_at_index("c", 2, 42, 0, 20);
        let p = plan(&j, &counts_for(&j, &more), Some(ts(0)), ts(30));
        assert_eq!(p.failed, Some(Failure::MaxFailedIndexesExceeded));
        assert_eq!(p.delete, vec!["d".to_string()]);
        assert_eq!(
            p.failed.unwrap().message(),
            "Job has exceeded the specified maximal number of failed indexes"
        );
    }

    #[test]
    fn a_job_managed_by_another_controller_is_left_to_it() {
        assert!(is_managed_by_job_controller(&job(json!({}))));
        assert!(is_managed_by_job_controller(&job(
            json!({"managedBy": JOB_CONTROLLER_NAME})
        )));
        assert!(!is_managed_by_job_controller(&job(
            json!({"managedBy": "kueue.x-k8s.io/multikueue"})
        )));
    }

    #[test]
    fn an_indexed_job_removes_duplicate_and_out_of_range_pods() {
        let mut ready = pod("b", "Running", Some(1));
        ready.status = Some(
            serde_json::from_value(json!({"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}]}))
            .unwrap(),
        );
        let pods = [
            pod("a", "Running", Some(1)),
            ready,
            pod("c", "Running", Some(3)),
            pod("d", "Running", None),
            pod("e", "Running", Some(0)),
        ];
        // completions lowered from 4 to 2 (an elastic Indexed Job).
        let spec = json!({"completions": 2, "parallelism": 2, "completionMode": "Indexed"});
        let j = job(spec);
        let c = counts_for(&j, &pods);
        // The ready pod of index 1 is kept; index 3 is out of range; d has no index.
        assert_eq!(c.surplus, vec!["a", "c", "d"]);
        assert_eq!(c.active_indexes, [0, 1].into());
        let p = plan(&j, &c, Some(ts(0)), ts(1));
        assert_eq!(
            (p.delete, p.create),
            (vec!["a".into(), "c".into(), "d".into()], vec![])
        );
    }

    #[test]
    fn lowering_parallelism_deletes_the_least_advanced_pods_first() {
        let running = |name: &str| {
            let mut p = pod(name, "Running", None);
            p.spec = Some(
                serde_json::from_value(json!({"nodeName": "n1",
                "containers": [{"name": "c", "image": "busybox"}]}))
                .unwrap(),
            );
            p.status = Some(
                serde_json::from_value(json!({"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}]}))
                .unwrap(),
            );
            p
        };
        // Listed first: two running, ready pods; then one not yet scheduled.
        let pods = [running("a"), running("b"), pod("c", "Pending", None)];
        let j = job(json!({"completions": 3, "parallelism": 2}));
        let c = counts_for(&j, &pods);
        assert_eq!(c.active[0], "c");
        let p = plan(&j, &c, Some(ts(0)), ts(1));
        assert_eq!((p.delete, p.create), (vec!["c".to_string()], vec![]));
    }

    #[test]
    fn indexes_compress_into_ranges() {
        let set = |v: &[i32]| v.iter().copied().collect::<BTreeSet<_>>();
        assert_eq!(format_indexes(&set(&[])), "");
        assert_eq!(format_indexes(&set(&[0])), "0");
        assert_eq!(format_indexes(&set(&[1, 3, 4, 5, 7, 8])), "1,3-5,7,8");
    }

    #[test]
    fn backoff_doubles_up_to_six_minutes() {
        assert_eq!(backoff_delay(0), Duration::ZERO);
        assert_eq!(backoff_delay(1), Duration::from_secs(10));
        assert_eq!(backoff_delay(2), Duration::from_secs(20));
        assert_eq!(backoff_delay(4), Duration::from_secs(80));
        assert_eq!(backoff_delay(6), Duration::from_secs(320));
        assert_eq!(backoff_delay(7), Duration::from_secs(360));
        assert_eq!(backoff_delay(1000), Duration::from_secs(360));
    }

    #[test]
    fn a_new_job_starts_parallelism_pods_up_to_its_completions() {
        let none = PodCounts::default();
        let p = plan(
            &job(json!({"completions": 5, "parallelism": 2})),
            &none,
            None,
            ts(0),
        );
        assert_eq!(p.create, vec![None, None]);
        let p = plan(
            &job(json!({"completions": 1, "parallelism": 3})),
            &none,
            None,
            ts(0),
        );
        assert_eq!(p.create.len(), 1);
        // Two succeeded, one running: one more of the five may start.
        let c = counts(
            &[
                pod("a", "Succeeded", None),
                pod("b", "Succeeded", None),
                pod("c", "Running", None),
            ],
            false,
            Some(5),
        );
        let p = plan(
            &job(json!({"completions": 5, "parallelism": 2})),
            &c,
            Some(ts(0)),
            ts(1),
        );
        assert_eq!(p.create.len(), 1);
        assert_eq!(p.succeeded, None);
    }

    #[test]
    fn enough_successes_complete_the_job_and_stop_the_rest() {
        let c = counts(
            &[pod("a", "Succeeded", None), pod("b", "Running", None)],
            false,
            Some(1),
        );
        let p = plan(
            &job(json!({"completions": 1, "parallelism": 2})),
            &c,
            Some(ts(0)),
            ts(1),
        );
        assert_eq!(p.succeeded, Some(Success::CompletionsReached));
        assert_eq!(p.delete, vec!["b".to_string()]);
        assert!(p.create.is_empty());
        // A work queue (no completions) succeeds once one pod did and none runs.
        let c = counts(&[pod("a", "Succeeded", None)], false, None);
        assert!(
            plan(&job(json!({"parallelism": 3})), &c, Some(ts(0)), ts(1))
                .succeeded
                .is_some()
        );
        let c = counts(
            &[pod("a", "Succeeded", None), pod("b", "Running", None)],
            false,
            None,
        );
        let p = plan(&job(json!({"parallelism": 3})), &c, Some(ts(0)), ts(1));
        assert_eq!(p.succeeded, None);
        assert!(p.create.is_empty(), "no new pods once one succeeded: {p:?}");
    }

    #[test]
    fn failures_past_the_backoff_limit_fail_the_job() {
        let failed: Vec<Pod> = (0..3)
            .map(|i| pod(&format!("f{i}"), "Failed", None))
            .collect();
        let c = counts(&failed, false, Some(1));
        let p = plan(
            &job(json!({"completions": 1, "backoffLimit": 2})),
            &c,
            Some(ts(0)),
            ts(1),
        );
        assert_eq!(p.failed, Some(Failure::BackoffLimitExceeded));
        // At the limit, the failed pod is replaced after the back-off since it failed
        // (its creation here: 2020, long before `now`).
        let c = counts(&failed[..2], false, Some(1));
        let p = plan(
            &job(json!({"completions": 1, "backoffLimit": 2})),
            &c,
            Some(ts(0)),
            ts(1),
        );
        assert_eq!(p.failed, None);
        assert_eq!(p.create.len(), 1);
    }

    #[test]
    fn a_recent_failure_delays_the_replacement() {
        let mut f = pod("f", "Failed", None);
        f.metadata.creation_timestamp = Some(Time(ts(0)));
        let c = counts(&[f], false, Some(1));
        let p = plan(&job(json!({"completions": 1})), &c, Some(ts(0)), ts(4));
        assert!(p.create.is_empty());
        assert_eq!(p.requeue, Some(Duration::from_secs(6)));
        let p = plan(&job(json!({"completions": 1})), &c, Some(ts(0)), ts(10));
        assert_eq!(p.create.len(), 1);
    }

    #[test]
    fn the_active_deadline_fails_the_job_and_is_waited_for() {
        let c = counts(&[pod("a", "Running", None)], false, Some(1));
        let j = job(json!({"completions": 1, "activeDeadlineSeconds": 30}));
        let p = plan(&j, &c, Some(ts(0)), ts(10));
        assert_eq!(p.failed, None);
        assert_eq!(p.requeue, Some(Duration::from_secs(20)));
        let p = plan(&j, &c, Some(ts(0)), ts(30));
        assert_eq!(p.failed, Some(Failure::DeadlineExceeded));
        assert_eq!(p.delete, vec!["a".to_string()]);
    }

    #[test]
    fn indexed_jobs_run_each_missing_index_once() {
        let j = job(json!({"completions": 4, "parallelism": 3, "completionMode": "Indexed"}));
        let c = counts(
            &[
                pod("a", "Succeeded", Some(0)),
                pod("b", "Succeeded", Some(0)),
                pod("c", "Running", Some(2)),
            ],
            true,
            Some(4),
        );
        assert_eq!(c.succeeded, 1, "an index counts once");
        let p = plan(&j, &c, Some(ts(0)), ts(1));
        assert_eq!(p.create, vec![Some(1), Some(3)]);
        let done = counts(
            &(0..4)
                .map(|i| pod(&format!("p{i}"), "Succeeded", Some(i)))
                .collect::<Vec<_>>(),
            true,
            Some(4),
        );
        assert!(plan(&j, &done, Some(ts(0)), ts(1)).succeeded.is_some());
        assert_eq!(format_indexes(&done.succeeded_indexes), "0-3");
    }

    #[test]
    fn suspended_jobs_stop_their_pods() {
        let c = counts(&[pod("a", "Running", None)], false, Some(1));
        let p = plan(
            &job(json!({"completions": 1, "suspend": true})),
            &c,
            None,
            ts(1),
        );
        assert_eq!(p.delete, vec!["a".to_string()]);
        assert!(p.create.is_empty());
    }

    #[test]
    fn indexed_pods_carry_their_index() {
        let j = job(json!({"completions": 2, "completionMode": "Indexed"}));
        let p = pod_from_template(&j, Some(1), None);
        assert_eq!(p.metadata.generate_name.as_deref(), Some("j-1-"));
        assert_eq!(p.metadata.labels.as_ref().unwrap()[COMPLETION_INDEX], "1");
        let spec = p.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("j-1"));
        let env = &spec.containers[0].env.as_ref().unwrap()[0];
        assert_eq!(env.name, "JOB_COMPLETION_INDEX");
        let owner = &p.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Job", "u1", Some(true))
        );
        let plain = pod_from_template(&job(json!({})), None, None);
        assert_eq!(plain.metadata.generate_name.as_deref(), Some("j-"));
    }

    /// Upstream's `MaxUncountedPods`: pods already in the status always go on; new
    /// ones only while the status has room, and the rest wait for the next sync.
    #[test]
    fn uncounted_pods_stay_within_the_cap() {
        let pods: Vec<TrackedPod> = (0..6)
            .map(|i| TrackedPod {
                name: format!("p{i}"),
                uid: format!("u{i}"),
                finished: true,
                succeeded: i % 2 == 0,
            })
            .collect();
        let names = |release: &[&TrackedPod]| -> Vec<String> {
            release.iter().map(|p| p.name.clone()).collect()
        };
        let none = BTreeSet::new();
        let (release, left_out) = within_uncounted_cap(pods.iter(), &none, &none, 10);
        assert_eq!(release.len(), 6);
        assert!(!left_out);
        let (release, left_out) = within_uncounted_cap(pods.iter(), &none, &none, 6);
        assert_eq!(release.len(), 6);
        assert!(!left_out, "exactly filling the status leaves nobody out");
        let succeeded: BTreeSet<&str> = ["u4", "x1"].into();
        let failed: BTreeSet<&str> = ["u5"].into();
        let (release, left_out) = within_uncounted_cap(pods.iter(), &succeeded, &failed, 5);
        assert_eq!(names(&release), ["p4", "p5", "p0", "p1"]);
        assert!(left_out);
        let full: BTreeSet<&str> = ["a", "b", "c", "d", "e", "u1"].into();
        let (release, left_out) = within_uncounted_cap(pods.iter(), &full, &none, 5);
        assert_eq!(
            names(&release),
            ["p1"],
            "a full status still lets its own pods go"
        );
        assert!(left_out);
    }
}
