//! The ReplicaSet controller (upstream `pkg/controller/replicaset`), which also drives
//! ReplicationControllers through the same code (upstream's `replication` package is
//! a thin adapter over it too).
//!
//! Pure part: [`claim_decision`] (adoption / release by selector and controllerRef),
//! [`plan_replicas`] (the create/delete diff, capped by `burstReplicas`, deletions
//! ranked as upstream's `ActivePodsWithRanks`), [`batch_sizes`] (slow start),
//! [`calculate_status`]. IO part: [`ReplicaSetController`] (informers, expectations,
//! writes).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::EventSink;
use crate::expectations::Expectations;
use crate::podcontrol::{create_pod, delete_pod};
use crate::util::{
    controller_of, created_secs, is_pod_active, is_pod_ready, labels, new_controller_ref, pod_node,
    pod_phase, seconds_until_available, selector_is_empty, selector_matches,
};
use crate::{Action, Controller, Error, Result, split_key};

/// Upstream's `BurstReplicas`: at most this many creates or deletes per sync.
pub const BURST_REPLICAS: usize = 500;
/// Upstream's `SlowStartInitialBatchSize`.
pub const SLOW_START_INITIAL_BATCH: usize = 1;
/// The pod-deletion-cost annotation (PodDeletionCost, GA).
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// A ReplicaSet or ReplicationController, as the shared code sees it.
#[derive(Debug, Clone)]
pub struct RsView {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub meta: ObjectMeta,
    pub replicas: i32,
    pub min_ready_seconds: i32,
    pub selector: LabelSelector,
    pub template: PodTemplateSpec,
    pub status: ReplicaSetStatus,
}

impl RsView {
    pub fn uid(&self) -> &str {
        self.meta.uid.as_deref().unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or_default()
    }
    pub fn namespace(&self) -> &str {
        self.meta.namespace.as_deref().unwrap_or_default()
    }
    /// Whether `pod`'s labels match the selector (an empty selector matches nothing).
    pub fn selects(&self, pod: &Pod) -> bool {
        !selector_is_empty(&self.selector)
            && selector_matches(&self.selector, &labels(&pod.metadata))
    }
}

/// A kind the replica-set code drives.
pub trait ReplicaOwner:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// Upstream controller name (`replicaset` / `replicationcontroller`).
    const CONTROLLER: &'static str;
    fn view(&self) -> RsView;
}

impl ReplicaOwner for ReplicaSet {
    const CONTROLLER: &'static str = "replicaset";
    fn view(&self) -> RsView {
        let spec = self.spec.clone().unwrap_or_default();
        RsView {
            api_version: "apps/v1",
            kind: "ReplicaSet",
            meta: self.metadata.clone(),
            replicas: spec.replicas.unwrap_or(1),
            min_ready_seconds: spec.min_ready_seconds.unwrap_or(0),
            selector: spec.selector,
            template: spec.template.unwrap_or_default(),
            status: self.status.clone().unwrap_or_default(),
        }
    }
}

impl ReplicaOwner for ReplicationController {
    const CONTROLLER: &'static str = "replicationcontroller";
    fn view(&self) -> RsView {
        let spec = self.spec.clone().unwrap_or_default();
        let template = spec.template.unwrap_or_default();
        // An RC without selector selects its template's labels (defaulting does the same).
        let sel = spec
            .selector
            .filter(|s| !s.is_empty())
            .or_else(|| template.metadata.as_ref().and_then(|m| m.labels.clone()));
        RsView {
            api_version: "v1",
            kind: "ReplicationController",
            meta: self.metadata.clone(),
            replicas: spec.replicas.unwrap_or(1),
            min_ready_seconds: spec.min_ready_seconds.unwrap_or(0),
            selector: LabelSelector {
                match_labels: sel,
                match_expressions: None,
            },
            template,
            status: self
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
        }
    }
}

// ---------------------------------------------------------------------------------
// Pure planning
// ---------------------------------------------------------------------------------

/// What to do with one pod when claiming (upstream `BaseControllerRefManager.ClaimObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Ours, and the selector matches.
    Owned,
    /// Someone else's, or not ours to take.
    Ignore,
    /// An orphan that matches: adopt it (set our controllerRef).
    Adopt,
    /// Ours, but the selector no longer matches: release it (drop our ref).
    Release,
}

/// The claim decision for a pod, given the owner's uid, deletion state and selector match.
pub fn claim_decision(
    owner_uid: &str,
    owner_namespace: &str,
    owner_deleting: bool,
    pod: &Pod,
    matches: bool,
) -> Claim {
    if let Some(r) = controller_of(&pod.metadata) {
        if r.uid != owner_uid {
            return Claim::Ignore;
        }
        if matches {
            return Claim::Owned;
        }
        if owner_deleting {
            return Claim::Ignore;
        }
        return Claim::Release;
    }
    if owner_deleting || !matches || pod.metadata.deletion_timestamp.is_some() {
        return Claim::Ignore;
    }
    if pod.metadata.namespace.as_deref().unwrap_or_default() != owner_namespace {
        return Claim::Ignore;
    }
    Claim::Adopt
}

/// The controller a set of pods is claimed for.
#[derive(Debug, Clone, Copy)]
pub struct ClaimingOwner<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub deleting: bool,
    /// Finalizers an adopted pod gets with the controllerRef (upstream adds the Job
    /// controller's tracking finalizer this way).
    pub adopt_finalizers: &'a [&'a str],
}

/// Upstream `PodControllerRefManager.ClaimPods`: of `candidates`, the pods that are
/// the owner's (its controllerRef, `selects` true), orphans that `selects` adopted (set
/// our controllerRef, only after re-reading the owner `K` fresh: upstream's
/// `RecheckDeletionTimestamp`), and owned pods `selects` no longer takes released.
pub async fn claim_pods<K>(
    client: &kube::Client,
    owner: ClaimingOwner<'_>,
    candidates: impl IntoIterator<Item = Arc<Pod>>,
    selects: impl Fn(&Pod) -> bool,
) -> Result<Vec<Arc<Pod>>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), owner.namespace);
    let mut owned: Vec<Arc<Pod>> = Vec::new();
    let mut fresh_checked: Option<bool> = None;
    for p in candidates {
        let pn = p.metadata.name.clone().unwrap_or_default();
        match claim_decision(owner.uid, owner.namespace, owner.deleting, &p, selects(&p)) {
            Claim::Owned => owned.push(p),
            Claim::Ignore => {}
            Claim::Adopt => {
                if fresh_checked.is_none() {
                    let api: Api<K> = Api::namespaced(client.clone(), owner.namespace);
                    fresh_checked = Some(api.get_opt(owner.name).await?.is_some_and(|f| {
                        f.meta().uid.as_deref() == Some(owner.uid)
                            && f.meta().deletion_timestamp.is_none()
                    }));
                }
                if fresh_checked != Some(true) {
                    continue;
                }
                let r = new_controller_ref(owner.api_version, owner.kind, owner.name, owner.uid);
                let mut patch =
                    json!({"metadata": {"ownerReferences": [r], "uid": p.metadata.uid}});
                if !owner.adopt_finalizers.is_empty() {
                    patch["metadata"]["finalizers"] = json!(owner.adopt_finalizers);
                }
                match pods_api
                    .patch(&pn, &PatchParams::default(), &Patch::Strategic(patch))
                    .await
                {
                    Ok(np) => owned.push(Arc::new(np)),
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Claim::Release => {
                let patch = json!({"metadata": {
                    "ownerReferences": [{"$patch": "delete", "uid": owner.uid}],
                    "uid": p.metadata.uid}});
                match pods_api
                    .patch(&pn, &PatchParams::default(), &Patch::Strategic(patch))
                    .await
                {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(owned)
}

/// The slow-start batch sizes for `count` creates: 1, 2, 4, ... (upstream
/// `slowStartBatch`). The runner stops at the first batch with a failure.
pub fn batch_sizes(count: usize, initial: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut remaining = count;
    let mut size = remaining.min(initial.max(1));
    while size > 0 {
        out.push(size);
        remaining -= size;
        size = (2 * size).min(remaining);
    }
    out
}

/// Runs `f` `count` times in slow-start batches, concurrently within a batch; stops
/// after the first batch with an error. Returns (successes, first error).
pub async fn slow_start_batch<F, Fut, E>(count: usize, initial: usize, f: F) -> (usize, Option<E>)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<(), E>>,
{
    let mut successes = 0;
    for size in batch_sizes(count, initial) {
        let results = futures::future::join_all((0..size).map(|_| f())).await;
        let mut first = None;
        for r in results {
            match r {
                Ok(()) => successes += 1,
                Err(e) => {
                    if first.is_none() {
                        first = Some(e);
                    }
                }
            }
        }
        if first.is_some() {
            return (successes, first);
        }
    }
    (successes, None)
}

/// The create/delete plan of one sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaPlan {
    Nothing,
    /// Create this many pods (already capped by the burst limit).
    Create(usize),
    /// Delete these pods (indices into the active pods given), best candidates first.
    Delete(Vec<usize>),
}

/// Upstream `manageReplicas`' arithmetic: `active` are the owned active pods, `related`
/// the active pods of the owner's siblings (for the co-location rank).
pub fn plan_replicas(
    desired: i32,
    active: &[&Pod],
    related: &[&Pod],
    burst: usize,
    now: Timestamp,
) -> ReplicaPlan {
    let desired = desired.max(0) as usize;
    match active.len().cmp(&desired) {
        Ordering::Equal => ReplicaPlan::Nothing,
        Ordering::Less => ReplicaPlan::Create((desired - active.len()).min(burst)),
        Ordering::Greater => {
            let diff = (active.len() - desired).min(burst);
            let mut order = rank_for_deletion(active, related, now);
            order.truncate(diff);
            ReplicaPlan::Delete(order)
        }
    }
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match pod_phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn deletion_cost(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn ready_time_nanos(pod: &Pod) -> Option<i128> {
    crate::util::pod_condition(pod, "Ready")
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_nanosecond())
}

fn max_restarts(pod: &Pod) -> i32 {
    let Some(st) = &pod.status else { return 0 };
    st.init_container_statuses
        .iter()
        .flatten()
        .chain(st.container_statuses.iter().flatten())
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

fn log_rank(t: i128, now: i128) -> i64 {
    let d = now - t;
    if d > 0 { (d as f64).log2() as i64 } else { -1 }
}

/// Compares two times as upstream's LogarithmicScaleDown: `None` (zero) first, then
/// later first within the same log2 bucket of age; ties by uid.
fn compare_times(a: Option<i128>, b: Option<i128>, now: i128, ua: &str, ub: &str) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => {
            let diff = log_rank(x, now) - log_rank(y, now);
            if diff == 0 { ua.cmp(ub) } else { diff.cmp(&0) }
        }
    }
}

/// Upstream `ActivePodsWithRanks.Less` as an ordering: the pod to delete first is
/// "smaller". `rank` is the number of active related pods on the same node.
pub fn compare_for_deletion(a: &Pod, ra: usize, b: &Pod, rb: usize, now: Timestamp) -> Ordering {
    let now = now.as_nanosecond();
    // 1. Unassigned < assigned.
    let (na, nb) = (pod_node(a), pod_node(b));
    if na != nb && (na.is_none() || nb.is_none()) {
        return if na.is_none() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    // 2. Pending < Unknown < Running.
    let (pa, pb) = (phase_ordinal(a), phase_ordinal(b));
    if pa != pb {
        return pa.cmp(&pb);
    }
    // 3. Not ready < ready.
    let (ya, yb) = (is_pod_ready(a), is_pod_ready(b));
    if ya != yb {
        return if !ya {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    // 4. Lower deletion cost < higher.
    let (ca, cb) = (deletion_cost(a), deletion_cost(b));
    if ca != cb {
        return ca.cmp(&cb);
    }
    // 5. More co-located pods < fewer.
    if ra != rb {
        return rb.cmp(&ra);
    }
    let (ua, ub) = (
        a.metadata.uid.as_deref().unwrap_or_default(),
        b.metadata.uid.as_deref().unwrap_or_default(),
    );
    // 6. Ready for less time < more time.
    if ya && yb {
        let (ta, tb) = (ready_time_nanos(a), ready_time_nanos(b));
        if ta != tb {
            let o = compare_times(ta, tb, now, ua, ub);
            if o != Ordering::Equal {
                return o;
            }
        }
    }
    // 7. Higher restart counts < lower.
    let (xa, xb) = (max_restarts(a), max_restarts(b));
    if xa != xb {
        return xb.cmp(&xa);
    }
    // 8. Newer (or zero) creation time < older.
    let t = |p: &Pod| {
        p.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_nanosecond())
    };
    let (ta, tb) = (t(a), t(b));
    if ta != tb {
        return compare_times(ta, tb, now, ua, ub);
    }
    Ordering::Equal
}

/// Indices of `pods` in deletion order (upstream `getPodsToDelete` ranking).
pub fn rank_for_deletion(pods: &[&Pod], related: &[&Pod], now: Timestamp) -> Vec<usize> {
    let mut on_node: HashMap<&str, usize> = HashMap::new();
    for p in related {
        if is_pod_active(p) {
            *on_node.entry(pod_node(p).unwrap_or("")).or_default() += 1;
        }
    }
    let ranks: Vec<usize> = pods
        .iter()
        .map(|p| on_node.get(pod_node(p).unwrap_or("")).copied().unwrap_or(0))
        .collect();
    let mut idx: Vec<usize> = (0..pods.len()).collect();
    idx.sort_by(|&i, &j| compare_for_deletion(pods[i], ranks[i], pods[j], ranks[j], now));
    idx
}

/// Upstream `calculateStatus` (+ `observedGeneration`). `manage_error` is the error of
/// this sync's creates/deletes, if any; `diff` is `len(active) - desired` before them.
pub fn calculate_status(
    rs: &RsView,
    active: &[&Pod],
    manage_error: Option<&str>,
    now: Timestamp,
) -> ReplicaSetStatus {
    let mut st = rs.status.clone();
    let tmpl_labels: BTreeMap<String, String> = rs
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let mut fully = 0;
    let mut ready = 0;
    let mut available = 0;
    for p in active {
        let l = labels(&p.metadata);
        if tmpl_labels.iter().all(|(k, v)| l.get(k) == Some(v)) {
            fully += 1;
        }
        if is_pod_ready(p) {
            ready += 1;
            if crate::util::is_pod_available(p, rs.min_ready_seconds, now) {
                available += 1;
            }
        }
    }
    let has_failure = st
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "ReplicaFailure");
    match manage_error {
        Some(msg) if !has_failure => {
            let diff = active.len() as i64 - i64::from(rs.replicas);
            let reason = match diff.cmp(&0) {
                Ordering::Less => "FailedCreate",
                Ordering::Greater => "FailedDelete",
                Ordering::Equal => "",
            };
            st.conditions
                .get_or_insert_with(Vec::new)
                .push(ReplicaSetCondition {
                    type_: "ReplicaFailure".into(),
                    status: "True".into(),
                    reason: Some(reason.into()),
                    message: Some(msg.into()),
                    last_transition_time: Some(Time(now)),
                });
        }
        None if has_failure => {
            if let Some(c) = st.conditions.as_mut() {
                c.retain(|c| c.type_ != "ReplicaFailure");
            }
            if st.conditions.as_ref().is_some_and(|c| c.is_empty()) {
                st.conditions = None;
            }
        }
        _ => {}
    }
    st.replicas = active.len() as i32;
    st.fully_labeled_replicas = Some(fully);
    st.ready_replicas = Some(ready);
    st.available_replicas = Some(available);
    st.observed_generation = rs.meta.generation;
    st
}

/// A pod for `rs` from its template (upstream `GetPodFromTemplate`).
pub fn pod_from_template(rs: &RsView) -> Pod {
    let tm = rs.template.metadata.clone().unwrap_or_default();
    let prefix = format!("{}-", rs.name());
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(prefix),
            namespace: Some(rs.namespace().to_string()),
            labels: tm.labels,
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![new_controller_ref(
                rs.api_version,
                rs.kind,
                rs.name(),
                rs.uid(),
            )]),
            ..Default::default()
        },
        spec: rs.template.spec.clone(),
        status: None,
    }
}

fn status_equal(a: &ReplicaSetStatus, b: &ReplicaSetStatus) -> bool {
    a.replicas == b.replicas
        && a.fully_labeled_replicas.unwrap_or(0) == b.fully_labeled_replicas.unwrap_or(0)
        && a.ready_replicas.unwrap_or(0) == b.ready_replicas.unwrap_or(0)
        && a.available_replicas.unwrap_or(0) == b.available_replicas.unwrap_or(0)
        && a.observed_generation == b.observed_generation
        && a.conditions.as_deref().unwrap_or_default()
            == b.conditions.as_deref().unwrap_or_default()
}

// ---------------------------------------------------------------------------------
// IO: the controller
// ---------------------------------------------------------------------------------

fn now_secs() -> u64 {
    Timestamp::now().as_second().max(0) as u64
}

/// The ReplicaSet (or ReplicationController) controller.
pub struct ReplicaSetController<K: ReplicaOwner> {
    client: kube::Client,
    owners: Store<K>,
    pods: Store<Pod>,
    expectations: Arc<Expectations>,
    events: Arc<dyn EventSink>,
    burst: usize,
}

impl<K: ReplicaOwner> ReplicaSetController<K> {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(ReplicaSetController {
            client,
            owners: factory.informer::<K>().store(),
            pods: factory.informer::<Pod>().store(),
            expectations: Arc::new(Expectations::new()),
            events,
            burst: BURST_REPLICAS,
        })
    }

    /// The owners in the pod's namespace whose selector matches it.
    fn matching_owners(owners: &Store<K>, pod: &Pod) -> Vec<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        owners
            .list_namespace(ns)
            .iter()
            .filter(|o| o.view().selects(pod))
            .map(|o| object_key(&**o))
            .collect()
    }

    /// The key of the pod's controlling owner, if it is one of ours and still cached.
    fn owner_key(owners: &Store<K>, pod: &Pod) -> Option<String> {
        let r = controller_of(&pod.metadata)?;
        if r.kind != K::kind(&()) {
            return None;
        }
        let ns = pod.metadata.namespace.as_deref();
        let o = owners.get_by_name(ns, &r.name)?;
        (o.meta().uid.as_deref() == Some(r.uid.as_str())).then(|| object_key(&*o))
    }
}

#[async_trait::async_trait]
impl<K: ReplicaOwner> Controller for ReplicaSetController<K> {
    fn name(&self) -> &'static str {
        K::CONTROLLER
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        let exp = self.expectations.clone();
        factory.informer::<K>().add_event_handler(
            move |n: Notification<K>| {
                let key = object_key(&**n.object());
                if let Notification::Deleted { .. } = n {
                    exp.delete(&key);
                }
                q.add(key);
            },
            None,
        );
        let q = queue.clone();
        let exp = self.expectations.clone();
        let owners = self.owners.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| {
                let deleted = |pod: &Pod| {
                    if let Some(k) = Self::owner_key(&owners, pod) {
                        exp.deletion_observed(&k, pod.metadata.uid.as_deref().unwrap_or_default());
                        q.add(k);
                    }
                };
                match n {
                    Notification::Added { obj, .. } => {
                        if obj.metadata.deletion_timestamp.is_some() {
                            deleted(&obj);
                        } else if let Some(k) = Self::owner_key(&owners, &obj) {
                            exp.creation_observed(&k);
                            q.add(k);
                        } else if controller_of(&obj.metadata).is_none() {
                            for k in Self::matching_owners(&owners, &obj) {
                                q.add(k);
                            }
                        }
                    }
                    Notification::Updated { old, new } => {
                        if old.metadata.resource_version == new.metadata.resource_version {
                            return;
                        }
                        let label_changed = old.metadata.labels != new.metadata.labels;
                        if new.metadata.deletion_timestamp.is_some() {
                            deleted(&new);
                            if label_changed {
                                deleted(&old);
                            }
                            return;
                        }
                        let old_ref = controller_of(&old.metadata).map(|r| r.uid.clone());
                        let new_ref = controller_of(&new.metadata).map(|r| r.uid.clone());
                        if old_ref != new_ref
                            && let Some(k) = Self::owner_key(&owners, &old)
                        {
                            q.add(k);
                        }
                        if let Some(k) = Self::owner_key(&owners, &new) {
                            // A pod turning ready may become available after minReadySeconds.
                            if !is_pod_ready(&old)
                                && is_pod_ready(&new)
                                && let Some(o) = owners.get(&k)
                                && o.view().min_ready_seconds > 0
                            {
                                let secs = o.view().min_ready_seconds as u64 + 1;
                                q.add_after(k.clone(), Duration::from_secs(secs));
                            }
                            q.add(k);
                        } else if new_ref.is_none() && (label_changed || old_ref != new_ref) {
                            for k in Self::matching_owners(&owners, &new) {
                                q.add(k);
                            }
                        }
                    }
                    Notification::Deleted { obj, .. } => deleted(&obj),
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, name) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let Some(owner) = self.owners.get(key) else {
            self.expectations.delete(key);
            return Ok(Action::Done);
        };
        let rs = owner.view();
        let now = Timestamp::now();
        let needs_sync = self.expectations.satisfied(key, now_secs());
        let deleting = rs.meta.deletion_timestamp.is_some();

        // Claim: the active pods of the namespace that are (or become) ours.
        let claiming = ClaimingOwner {
            api_version: rs.api_version,
            kind: rs.kind,
            namespace: ns,
            name,
            uid: rs.uid(),
            deleting,
            adopt_finalizers: &[],
        };
        let candidates = self
            .pods
            .list_namespace(ns)
            .into_iter()
            .filter(|p| is_pod_active(p));
        let owned = claim_pods::<K>(&self.client, claiming, candidates, |p| rs.selects(p)).await?;
        let active: Vec<&Pod> = owned.iter().map(|p| &**p).collect();

        let mut manage_error: Option<String> = None;
        if needs_sync
            && !deleting
            && let Err(e) = self.manage(&rs, key, &active, now).await
        {
            manage_error = Some(e.to_string());
        }

        let status = calculate_status(&rs, &active, manage_error.as_deref(), now);
        if !status_equal(&status, &rs.status) {
            // A status update retried once on a fresh copy, as upstream's
            // `updateReplicaSetStatus` (the controller roles grant `update` on the
            // status subresource, not `patch`).
            let api: Api<K> = Api::namespaced(self.client.clone(), ns);
            let mut obj = serde_json::to_value(&*owner)?;
            for attempt in 0..2 {
                obj["status"] = status_json(&status);
                let body: K = serde_json::from_value(obj.clone())?;
                match api
                    .replace_status(name, &PostParams::default(), &body)
                    .await
                {
                    Ok(_) => break,
                    Err(e) if is_not_found(&e) => return Ok(Action::Done),
                    Err(e) if attempt == 0 && is_conflict(&e) => {
                        obj = serde_json::to_value(api.get(name).await?)?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if let Some(e) = manage_error {
            return Err(Error::Invalid(e));
        }
        // Requeue for the first pod that becomes available.
        let wait = active
            .iter()
            .filter_map(|p| seconds_until_available(p, rs.min_ready_seconds, now))
            .min();
        Ok(match wait {
            Some(s) => Action::RequeueAfter(Duration::from_secs(s as u64 + 1)),
            None => Action::Done,
        })
    }
}

/// The status as JSON with every counter present (zeros included), so a merge patch
/// resets counters that dropped to zero.
fn status_json(st: &ReplicaSetStatus) -> serde_json::Value {
    json!({
        "replicas": st.replicas,
        "fullyLabeledReplicas": st.fully_labeled_replicas.unwrap_or(0),
        "readyReplicas": st.ready_replicas.unwrap_or(0),
        "availableReplicas": st.available_replicas.unwrap_or(0),
        "observedGeneration": st.observed_generation,
        "conditions": st.conditions,
    })
}

/// Whether a kube error is a 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Whether a kube error is a 409.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Deletes `name` only while it is the object with `uid` (the one a controller judged;
/// one recreated under that name is left alone). Gone already, or replaced (the UID
/// precondition failed), counts as done.
pub async fn delete_exactly<K>(api: &Api<K>, name: &str, uid: Option<String>) -> kube::Result<()>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid,
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

impl<K: ReplicaOwner> ReplicaSetController<K> {
    async fn manage(&self, rs: &RsView, key: &str, active: &[&Pod], now: Timestamp) -> Result<()> {
        let ns = rs.namespace();
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        // Related pods: every active pod in the namespace controlled by a sibling (same
        // controlling owner, e.g. the Deployment) for the co-location rank.
        let related: Vec<Arc<Pod>> = match controller_of(&rs.meta) {
            Some(parent) => {
                let siblings: Vec<String> = self
                    .owners
                    .list_namespace(ns)
                    .iter()
                    .filter(|o| controller_of(o.meta()).is_some_and(|r| r.uid == parent.uid))
                    .filter_map(|o| o.meta().uid.clone())
                    .collect();
                self.pods
                    .list_namespace(ns)
                    .into_iter()
                    .filter(|p| {
                        controller_of(&p.metadata).is_some_and(|r| siblings.contains(&r.uid))
                    })
                    .collect()
            }
            None => active.iter().map(|p| Arc::new((*p).clone())).collect(),
        };
        let related: Vec<&Pod> = related.iter().map(|p| &**p).collect();
        match plan_replicas(rs.replicas, active, &related, self.burst, now) {
            ReplicaPlan::Nothing => Ok(()),
            ReplicaPlan::Create(n) => {
                self.expectations.expect_creations(key, n, now_secs());
                let template = pod_from_template(rs);
                let owner = owner_ref_for_events(rs);
                let (ok, err) = slow_start_batch(n, SLOW_START_INITIAL_BATCH, || {
                    let (api, pod, owner) = (&pods_api, &template, &owner);
                    async move { create_pod(api, pod, &*self.events, owner).await.map(|_| ()) }
                })
                .await;
                for _ in ok..n {
                    self.expectations.creation_observed(key);
                }
                err.map_or(Ok(()), |e| Err(e.into()))
            }
            ReplicaPlan::Delete(idx) => {
                let victims: Vec<&Pod> = idx.iter().map(|&i| active[i]).collect();
                let uids: Vec<String> = victims
                    .iter()
                    .map(|p| p.metadata.uid.clone().unwrap_or_default())
                    .collect();
                self.expectations.expect_deletions(key, &uids, now_secs());
                let owner = owner_ref_for_events(rs);
                let results = futures::future::join_all(victims.iter().map(|p| {
                    let name = p.metadata.name.as_deref().unwrap_or_default();
                    delete_pod(&pods_api, name, &*self.events, &owner)
                }))
                .await;
                // As upstream's, the first error that is not a pod already gone fails
                // the sync; every failed delete is one the informer will not report.
                let mut first = None;
                for (r, uid) in results.into_iter().zip(&uids) {
                    if let Err(e) = r {
                        self.expectations.deletion_observed(key, uid);
                        if !is_not_found(&e) {
                            first.get_or_insert(e);
                        }
                    }
                }
                first.map_or(Ok(()), |e| Err(e.into()))
            }
        }
    }
}

/// The event reference of `rs`.
fn owner_ref_for_events(rs: &RsView) -> k8s_openapi::api::core::v1::ObjectReference {
    crate::events::reference(rs.api_version, rs.kind, &rs.meta)
}

/// Seconds since the epoch of a pod's creation (for tests and callers).
pub fn pod_age_secs(p: &Pod, now: Timestamp) -> i64 {
    now.as_second() - created_secs(&p.metadata)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    pub fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[derive(Clone, Default)]
    pub struct P {
        pub name: &'static str,
        pub node: Option<&'static str>,
        pub phase: &'static str,
        pub ready_since: Option<i64>,
        pub created: i64,
        pub restarts: i32,
        pub cost: Option<i32>,
    }

    pub fn pod(p: P) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(p.name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{}", p.name)),
                creation_timestamp: Some(Time(ts(p.created))),
                labels: Some([("app".to_string(), "web".to_string())].into()),
                annotations: p
                    .cost
                    .map(|c| [(POD_DELETION_COST.to_string(), c.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: p.node.map(Into::into),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(
                    if p.phase.is_empty() {
                        "Running"
                    } else {
                        p.phase
                    }
                    .into(),
                ),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if p.ready_since.is_some() {
                        "True"
                    } else {
                        "False"
                    }
                    .into(),
                    last_transition_time: p.ready_since.map(|s| Time(ts(s))),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![ContainerStatus {
                    name: "c".into(),
                    restart_count: p.restarts,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn names(pods: &[&Pod], idx: &[usize]) -> Vec<String> {
        idx.iter()
            .map(|&i| pods[i].metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn slow_start_batches_double() {
        let cases: &[(usize, &[usize])] = &[
            (0, &[]),
            (1, &[1]),
            (3, &[1, 2]),
            (10, &[1, 2, 4, 3]),
            (15, &[1, 2, 4, 8]),
            (16, &[1, 2, 4, 8, 1]),
        ];
        for (n, want) in cases {
            assert_eq!(batch_sizes(*n, 1), *want, "count {n}");
            assert_eq!(batch_sizes(*n, 1).iter().sum::<usize>(), *n);
        }
    }

    #[tokio::test]
    async fn slow_start_stops_after_a_failing_batch() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let (ok, err) = slow_start_batch(10, 1, || {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { if n == 2 { Err("boom") } else { Ok(()) } }
        })
        .await;
        // Batches 1 and 2: the third call (in batch 2) fails; batch 3 never runs.
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert_eq!(ok, 2);
        assert_eq!(err, Some("boom"));
    }

    #[test]
    fn deletion_ranking_follows_active_pods_with_ranks() {
        let now = 100_000;
        let base = P {
            node: Some("n1"),
            phase: "Running",
            ready_since: Some(1000),
            created: 500,
            ..Default::default()
        };
        let cases: Vec<(&str, Vec<P>, Vec<&str>)> = vec![
            (
                "unassigned first",
                vec![
                    P {
                        name: "assigned",
                        ..base.clone()
                    },
                    P {
                        name: "unassigned",
                        node: None,
                        phase: "Pending",
                        ready_since: None,
                        ..base.clone()
                    },
                ],
                vec!["unassigned", "assigned"],
            ),
            (
                "pending < unknown < running",
                vec![
                    P {
                        name: "running",
                        ..base.clone()
                    },
                    P {
                        name: "unknown",
                        phase: "Unknown",
                        ..base.clone()
                    },
                    P {
                        name: "pending",
                        phase: "Pending",
                        ..base.clone()
                    },
                ],
                vec!["pending", "unknown", "running"],
            ),
            (
                "not ready first",
                vec![
                    P {
                        name: "ready",
                        ..base.clone()
                    },
                    P {
                        name: "notready",
                        ready_since: None,
                        ..base.clone()
                    },
                ],
                vec!["notready", "ready"],
            ),
            (
                "lower deletion cost first",
                vec![
                    P {
                        name: "cheap",
                        cost: Some(-5),
                        ..base.clone()
                    },
                    P {
                        name: "dear",
                        cost: Some(10),
                        ..base.clone()
                    },
                ],
                vec!["cheap", "dear"],
            ),
            (
                "doubled up first",
                vec![
                    P {
                        name: "alone",
                        node: Some("n2"),
                        ..base.clone()
                    },
                    P {
                        name: "crowded",
                        node: Some("n1"),
                        ..base.clone()
                    },
                ],
                vec!["crowded", "alone"],
            ),
            (
                "ready more recently first (different log buckets)",
                vec![
                    P {
                        name: "old-ready",
                        ready_since: Some(10),
                        ..base.clone()
                    },
                    P {
                        name: "new-ready",
                        ready_since: Some(now - 2),
                        ..base.clone()
                    },
                ],
                vec!["new-ready", "old-ready"],
            ),
            (
                "more restarts first",
                vec![
                    P {
                        name: "stable",
                        restarts: 0,
                        ..base.clone()
                    },
                    P {
                        name: "flappy",
                        restarts: 7,
                        ..base.clone()
                    },
                ],
                vec!["flappy", "stable"],
            ),
            (
                "newer first",
                vec![
                    P {
                        name: "older",
                        created: 10,
                        ..base.clone()
                    },
                    P {
                        name: "newer",
                        created: now - 3,
                        ..base.clone()
                    },
                ],
                vec!["newer", "older"],
            ),
        ];
        for (what, ps, want) in cases {
            let pods: Vec<Pod> = ps.into_iter().map(pod).collect();
            let refs: Vec<&Pod> = pods.iter().collect();
            // Related pods: one extra on n1 so "crowded" is doubled up.
            let extra = pod(P {
                name: "sibling",
                ..base.clone()
            });
            let mut related = refs.clone();
            related.push(&extra);
            let order = rank_for_deletion(&refs, &related, ts(now));
            assert_eq!(names(&refs, &order), want, "{what}");
        }
    }

    #[test]
    fn plan_replicas_diff_and_burst() {
        let now = ts(10_000);
        let pods: Vec<Pod> = (0..5)
            .map(|i| {
                pod(P {
                    name: ["a", "b", "c", "d", "e"][i],
                    node: Some("n"),
                    phase: "Running",
                    ready_since: Some(100),
                    created: 50,
                    ..Default::default()
                })
            })
            .collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(
            plan_replicas(5, &refs, &refs, 500, now),
            ReplicaPlan::Nothing
        );
        assert_eq!(
            plan_replicas(8, &refs, &refs, 500, now),
            ReplicaPlan::Create(3)
        );
        assert_eq!(
            plan_replicas(1000, &refs, &refs, 500, now),
            ReplicaPlan::Create(500)
        );
        match plan_replicas(2, &refs, &refs, 500, now) {
            ReplicaPlan::Delete(v) => assert_eq!(v.len(), 3),
            other => panic!("{other:?}"),
        }
        match plan_replicas(0, &refs, &refs, 2, now) {
            ReplicaPlan::Delete(v) => assert_eq!(v.len(), 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn expectations_prevent_overcreation_under_event_bursts() {
        // Simulates the controller loop: a sync that plans creates records
        // expectations; stale syncs (cache not yet showing the pods) must not act.
        let exp = Expectations::new();
        let mut cache: Vec<Pod> = Vec::new();
        let mut created = 0usize;
        let desired = 7;
        let mut in_flight = 0usize;
        for round in 0..20 {
            // Several events for the key arrive before the informer delivers the pods.
            if exp.satisfied("ns/rs", 0) {
                let refs: Vec<&Pod> = cache.iter().collect();
                if let ReplicaPlan::Create(n) = plan_replicas(desired, &refs, &refs, 500, ts(0)) {
                    exp.expect_creations("ns/rs", n, 0);
                    created += n;
                    in_flight += n;
                }
            }
            // Every third round the informer catches up with one pod.
            if round % 3 == 2 && in_flight > 0 {
                in_flight -= 1;
                cache.push(pod(P {
                    name: "x",
                    ..Default::default()
                }));
                exp.creation_observed("ns/rs");
            }
        }
        assert_eq!(created, desired as usize, "never over-creates");
    }

    #[test]
    fn claims() {
        let mut p = pod(P {
            name: "p",
            ..Default::default()
        });
        assert_eq!(claim_decision("rs1", "ns", false, &p, true), Claim::Adopt);
        assert_eq!(claim_decision("rs1", "ns", false, &p, false), Claim::Ignore);
        assert_eq!(claim_decision("rs1", "ns", true, &p, true), Claim::Ignore);
        assert_eq!(
            claim_decision("rs1", "other", false, &p, true),
            Claim::Ignore
        );
        p.metadata.owner_references = Some(vec![OwnerReference {
            uid: "rs1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        assert_eq!(claim_decision("rs1", "ns", false, &p, true), Claim::Owned);
        assert_eq!(
            claim_decision("rs1", "ns", false, &p, false),
            Claim::Release
        );
        assert_eq!(claim_decision("rs1", "ns", true, &p, false), Claim::Ignore);
        assert_eq!(claim_decision("rs2", "ns", false, &p, true), Claim::Ignore);
        let mut deleting = pod(P {
            name: "d",
            ..Default::default()
        });
        deleting.metadata.deletion_timestamp = Some(Time(ts(1)));
        assert_eq!(
            claim_decision("rs1", "ns", false, &deleting, true),
            Claim::Ignore
        );
    }

    fn view(replicas: i32, min_ready: i32) -> RsView {
        RsView {
            api_version: "apps/v1",
            kind: "ReplicaSet",
            meta: ObjectMeta {
                name: Some("rs".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                generation: Some(3),
                ..Default::default()
            },
            replicas,
            min_ready_seconds: min_ready,
            selector: LabelSelector {
                match_labels: Some([("app".to_string(), "web".to_string())].into()),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(
                        [
                            ("app".to_string(), "web".to_string()),
                            ("v".to_string(), "1".to_string()),
                        ]
                        .into(),
                    ),
                    ..Default::default()
                }),
                spec: None,
            },
            status: ReplicaSetStatus::default(),
        }
    }

    #[test]
    fn status_counts() {
        let now = 1000;
        let mut full = pod(P {
            name: "full",
            ready_since: Some(now - 100),
            ..Default::default()
        });
        full.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("v".into(), "1".into());
        let fresh = pod(P {
            name: "fresh",
            ready_since: Some(now - 2),
            ..Default::default()
        });
        let unready = pod(P {
            name: "unready",
            ..Default::default()
        });
        let pods = [&full, &fresh, &unready];
        let st = calculate_status(&view(3, 10), &pods, None, ts(now));
        assert_eq!(st.replicas, 3);
        assert_eq!(st.fully_labeled_replicas, Some(1));
        assert_eq!(st.ready_replicas, Some(2));
        assert_eq!(st.available_replicas, Some(1));
        assert_eq!(st.observed_generation, Some(3));
        let st0 = calculate_status(&view(3, 0), &pods, None, ts(now));
        assert_eq!(st0.available_replicas, Some(2));

        // A failing create sets ReplicaFailure/FailedCreate; a clean sync removes it.
        let mut rs = view(5, 0);
        let failed = calculate_status(&rs, &pods, Some("quota exceeded"), ts(now));
        let c = &failed.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.reason.as_deref()),
            ("ReplicaFailure", Some("FailedCreate"))
        );
        rs.status = failed;
        let ok = calculate_status(&rs, &pods, None, ts(now));
        assert!(ok.conditions.is_none());
        rs.replicas = 1;
        rs.status = ReplicaSetStatus::default();
        let del = calculate_status(&rs, &pods, Some("x"), ts(now));
        assert_eq!(
            del.conditions.unwrap()[0].reason.as_deref(),
            Some("FailedDelete")
        );
    }

    #[test]
    fn template_pods_carry_controller_ref() {
        let p = pod_from_template(&view(1, 0));
        assert_eq!(p.metadata.generate_name.as_deref(), Some("rs-"));
        let r = &p.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (
                r.kind.as_str(),
                r.uid.as_str(),
                r.controller,
                r.block_owner_deletion
            ),
            ("ReplicaSet", "u", Some(true), Some(true))
        );
        assert_eq!(
            p.metadata.labels.unwrap().get("v").map(String::as_str),
            Some("1")
        );
    }

    #[test]
    fn rc_view_defaults_selector_to_template_labels() {
        let rc: ReplicationController = serde_json::from_value(json!({
            "metadata": {"name": "rc", "namespace": "ns"},
            "spec": {"replicas": 2, "template": {"metadata": {"labels": {"a": "b"}}}}
        }))
        .unwrap();
        let v = rc.view();
        assert_eq!(v.kind, "ReplicationController");
        assert_eq!(v.replicas, 2);
        let p: Pod = serde_json::from_value(json!({"metadata": {"labels": {"a": "b"}}})).unwrap();
        assert!(v.selects(&p));
    }
}
