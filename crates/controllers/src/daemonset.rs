//! The DaemonSet controller (upstream `pkg/controller/daemon`, v1.33): one daemon pod
//! on every node that should run it.
//!
//! What it does, as upstream:
//! - eligibility ([`node_should_run`], upstream `NodeShouldRunDaemonPod`): the
//!   template's `nodeName` (if any), `nodeSelector` and required node affinity match the
//!   node, and the pod, with the default daemon tolerations added
//!   ([`add_daemon_tolerations`]: not-ready/unreachable NoExecute, the pressure and
//!   unschedulable NoSchedule taints, network-unavailable for hostNetwork pods),
//!   tolerates the node's NoSchedule/NoExecute taints. A pod that only fails on a
//!   NoSchedule taint keeps running ("should continue running");
//! - pods go through the default scheduler: each gets a required node affinity term
//!   `matchFields metadata.name In [<node>]` replacing the required terms
//!   ([`replace_node_name_affinity`]); generateName `<ds>-`, the template's labels plus
//!   `controller-revision-hash`, a controllerRef; expectations so a burst of events
//!   never creates twice; slow-start batches; at most 250 creates/deletes a sync;
//! - surplus pods (several on a node, or on a node that should not keep one) are
//!   deleted, oldest kept; failed pods are deleted (`FailedDaemonPod`) behind a per-node
//!   exponential back-off (1 s doubling to 15 min) and recreated; unscheduled pods
//!   aimed at a node that no longer exists are deleted;
//! - history: a ControllerRevision `<ds>-<hash>` per template with increasing revision
//!   numbers (an old template coming back gets the next number), old ones trimmed to
//!   `revisionHistoryLimit` unless a live pod still uses them; a name clash with a
//!   different template bumps `status.collisionCount`;
//! - `RollingUpdate` ([`plan_rolling_update`]): without surge, old pods are deleted while
//!   at most `maxUnavailable` daemon pods are unavailable (unavailable old pods are
//!   replaced at once), the core loop recreating them; with `maxSurge`, a new pod is
//!   started next to an old one and the old one deleted once the new is available.
//!   `OnDelete`: pods are replaced only when deleted by someone else;
//! - status ([`calculate_status`]) through `/status` with `replace_status`, retried once
//!   on conflict; `observedGeneration` only when expectations were satisfied, so
//!   `kubectl rollout status` does not finish early;
//! - orphan pods matching the selector are adopted, owned pods that stop matching are
//!   released (as the ReplicaSet controller, [`crate::replicaset::claim_decision`]).
//!
//! Pure part: [`node_should_run`], [`add_daemon_tolerations`],
//! [`replace_node_name_affinity`], [`target_node`], [`group_by_node`], [`plan_manage`],
//! [`plan_rolling_update`], [`calculate_status`], [`history_data`], [`FailedBackoff`].
//! IO part: [`DaemonSetController`].
//!
//! Deviations: the template hash is FNV-32a of the template's JSON
//! ([`crate::deployment::compute_hash`]), not of Go's struct dump (only stability
//! within a cluster matters); no `pod-template-generation` label (the apiserver here
//! sets no `deprecated.daemonset.template.generation` annotation); duplicate current
//! revisions are deleted without relabelling their pods first (their pods are then
//! rolled as old); ControllerRevisions are not adopted by selector, only those the
//! DaemonSet controls are read; a node being deleted gets no new pod (its pods keep
//! running until pod GC).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use ferrokube_api::nodeaffinity::{NAME_FIELD, pod_spec_matches_node};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::deployment::compute_hash;
use crate::events::{EventSink, EventType, emit, reference_to};
use crate::expectations::Expectations;
use crate::podcontrol::{create_pod, delete_pod};
use crate::replicaset::{
    ClaimingOwner, SLOW_START_INITIAL_BATCH, claim_pods, is_conflict, is_not_found,
    slow_start_batch,
};
use crate::tainteviction::tolerates;
use crate::util::{
    controller_of, is_pod_available, is_pod_ready, is_pod_terminal, labels, new_controller_ref,
    pod_node, pod_phase, scaled_value, selector_is_empty, selector_matches,
};
use crate::{Action, Controller, Error, Result, replace_status_retrying, split_key};

/// The label (on pods and ControllerRevisions) naming the template revision.
pub const UNIQUE_LABEL: &str = "controller-revision-hash";
/// Upstream's DaemonSet `BurstReplicas`.
pub const BURST_REPLICAS: usize = 250;
/// Upstream's `failedPodsBackoff` (1 s doubling, at most 15 min).
const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

// ---------------------------------------------------------------------------------
// Pure: eligibility
// ---------------------------------------------------------------------------------

fn toleration(key: &str, effect: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    }
}

/// Upstream `AddOrUpdateDaemonPodTolerations`: daemon pods survive node problems (the
/// node lifecycle controller does not evict them, and they still schedule onto nodes
/// under pressure or cordoned).
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        toleration("node.kubernetes.io/not-ready", "NoExecute"),
        toleration("node.kubernetes.io/unreachable", "NoExecute"),
        toleration("node.kubernetes.io/disk-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/memory-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/pid-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(toleration(
            "node.kubernetes.io/network-unavailable",
            "NoSchedule",
        ));
    }
    let tols = spec.tolerations.get_or_insert_with(Vec::new);
    for t in wanted {
        // Upstream `AddOrUpdateTolerationInPodSpec`: one with the same key, operator,
        // value and effect is replaced (dropping its tolerationSeconds).
        let same = |o: &Toleration| {
            o.key == t.key && o.operator == t.operator && o.value == t.value && o.effect == t.effect
        };
        match tols.iter_mut().find(|o| same(o)) {
            Some(o) => *o = t,
            None => tols.push(t),
        }
    }
}

/// Whether some taint with an effect `effects` accepts is tolerated by none of `tols`.
fn has_untolerated(node: &Node, tols: &[Toleration], effects: &[&str]) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .any(|t| !tols.iter().any(|tol| tolerates(tol, t)))
}

fn ds_template(ds: &DaemonSet) -> PodTemplateSpec {
    ds.spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default()
}

/// Upstream `NodeShouldRunDaemonPod`: (should run a pod, should keep a running one).
pub fn node_should_run(ds: &DaemonSet, node: &Node) -> (bool, bool) {
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    let mut spec = ds_template(ds).spec.unwrap_or_default();
    if let Some(n) = spec.node_name.as_deref()
        && !n.is_empty()
        && n != node_name
    {
        return (false, false);
    }
    add_daemon_tolerations(&mut spec);
    if !pod_spec_matches_node(&spec, node) {
        return (false, false);
    }
    let tols = spec.tolerations.as_deref().unwrap_or_default();
    if has_untolerated(node, tols, &["NoSchedule", "NoExecute"]) {
        // Running pods stay unless a NoExecute taint would evict them anyway.
        return (false, !has_untolerated(node, tols, &["NoExecute"]));
    }
    // A node on its way out gets no new pod; the one it has runs to the end.
    if node.metadata.deletion_timestamp.is_some() {
        return (false, true);
    }
    (true, true)
}

/// Upstream `ReplaceDaemonSetPodNodeNameNodeAffinity`: the required node affinity
/// becomes exactly "the node named `node`" (the other constraints were checked by
/// [`node_should_run`]), so the default scheduler places the pod there.
pub fn replace_node_name_affinity(affinity: Option<Affinity>, node: &str) -> Affinity {
    let selector = NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: NAME_FIELD.into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
            match_expressions: None,
        }],
    };
    let mut a = affinity.unwrap_or_default();
    a.node_affinity
        .get_or_insert_with(NodeAffinity::default)
        .required_during_scheduling_ignored_during_execution = Some(selector);
    a
}

/// Upstream `GetTargetNodeName`: the pod's node, or for an unscheduled pod the node
/// its `matchFields metadata.name In [x]` term names.
pub fn target_node(pod: &Pod) -> Option<String> {
    if let Some(n) = pod_node(pod) {
        return Some(n.to_string());
    }
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let r = terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|r| r.key == NAME_FIELD && r.operator == "In")?;
    match r.values.as_deref() {
        Some([v]) => Some(v.clone()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------
// Pure: pods per node, manage, rolling update, status
// ---------------------------------------------------------------------------------

/// A DaemonSet's pods by target node.
pub type NodePods<'a> = BTreeMap<String, Vec<&'a Pod>>;

/// Upstream `getNodesToDaemonPods(includeDeletedTerminal=false)`: pods by target node,
/// leaving out finished pods already being deleted (nothing more to do with them).
pub fn group_by_node<'a>(pods: &[&'a Pod]) -> NodePods<'a> {
    let mut out = NodePods::new();
    for p in pods {
        if is_pod_terminal(p) && p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(n) = target_node(p) {
            out.entry(n).or_default().push(*p);
        }
    }
    out
}

/// Upstream `podByCreationTimestampAndPhase`: scheduled first, then oldest, then name.
fn by_age(a: &&Pod, b: &&Pod) -> Ordering {
    let sched = |p: &Pod| pod_node(p).is_none();
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    sched(a)
        .cmp(&sched(b))
        .then_with(|| created(a).cmp(&created(b)))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

fn pod_hash(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(UNIQUE_LABEL))
        .map(String::as_str)
}

fn pod_name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn min_ready(ds: &DaemonSet) -> i32 {
    ds.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

/// Upstream's failed-pod back-off (`flowcontrol.Backoff`) per `<ds uid>/<node>`, time
/// passed in.
#[derive(Debug, Default)]
pub struct FailedBackoff {
    entries: HashMap<String, (Duration, Timestamp)>,
}

impl FailedBackoff {
    /// The current delay, if `key` is still backing off at `now`.
    pub fn in_backoff(&self, key: &str, now: Timestamp) -> Option<Duration> {
        let (d, at) = self.entries.get(key)?;
        let since = now.duration_since(*at).unsigned_abs();
        (since < *d).then_some(*d)
    }

    /// Records a failure: the delay doubles, or starts over after a long quiet spell.
    pub fn next(&mut self, key: &str, now: Timestamp) {
        let d = match self.entries.get(key) {
            Some((d, at)) if now.duration_since(*at).unsigned_abs() <= 2 * BACKOFF_MAX => {
                (*d * 2).min(BACKOFF_MAX)
            }
            _ => BACKOFF_INITIAL,
        };
        self.entries.insert(key.to_string(), (d, now));
    }

    /// Forgets entries quiet for longer than twice the maximum.
    pub fn gc(&mut self, now: Timestamp) {
        self.entries
            .retain(|_, (_, at)| now.duration_since(*at).unsigned_abs() <= 2 * BACKOFF_MAX);
    }
}

/// The core loop's decisions of one sync (upstream `manage` / `podsShouldBeOnNode`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagePlan {
    /// Nodes that need a daemon pod.
    pub create_on: Vec<String>,
    /// Pods to delete.
    pub delete: Vec<String>,
    /// Failed pods being deleted, as (pod, node), for `FailedDaemonPod` events.
    pub failed: Vec<(String, String)>,
    /// Sync again after this (a failed pod held back by the back-off).
    pub retry_after: Option<Duration>,
}

/// Whether the DaemonSet may run two pods on a node during an update.
fn allows_surge(ds: &DaemonSet) -> bool {
    surge_count(ds, 1).is_ok_and(|s| s != 0)
}

fn rolling(ds: &DaemonSet) -> Option<&k8s_openapi::api::apps::v1::RollingUpdateDaemonSet> {
    let s = ds.spec.as_ref()?.update_strategy.as_ref();
    match s.and_then(|s| s.type_.as_deref()) {
        None | Some("RollingUpdate") => s.and_then(|s| s.rolling_update.as_ref()),
        _ => None,
    }
}

/// Whether the update strategy is RollingUpdate (the default).
pub fn is_rolling_update(ds: &DaemonSet) -> bool {
    let t = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.type_.as_deref());
    matches!(t, None | Some("RollingUpdate"))
}

/// Upstream `SurgeCount`.
fn surge_count(ds: &DaemonSet, desired: i32) -> Result<i32, String> {
    match rolling(ds).and_then(|r| r.max_surge.as_ref()) {
        None => Ok(0),
        Some(v) => scaled_value(Some(v), desired, true),
    }
}

/// Upstream `UnavailableCount` (the apiserver defaults maxUnavailable to 1).
fn unavailable_count(ds: &DaemonSet, desired: i32) -> Result<i32, String> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    if !is_rolling_update(ds) {
        return Ok(0);
    }
    let default = IntOrString::Int(1);
    let v = rolling(ds)
        .and_then(|r| r.max_unavailable.as_ref())
        .unwrap_or(&default);
    scaled_value(Some(v), desired, true)
}

/// Upstream `manage`: which nodes need a pod and which pods go. `nodes` are all nodes,
/// `by_node` the DaemonSet's pods, `backoff` the failed-pod back-off (updated for the
/// failed pods this plan deletes).
pub fn plan_manage(
    ds: &DaemonSet,
    nodes: &[&Node],
    by_node: &NodePods<'_>,
    hash: &str,
    now: Timestamp,
    backoff: &mut FailedBackoff,
) -> ManagePlan {
    let mut plan = ManagePlan::default();
    let uid = ds.metadata.uid.as_deref().unwrap_or_default();
    let surge = allows_surge(ds);
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let (should_run, should_continue) = node_should_run(ds, node);
        let pods = by_node.get(&name);
        if should_run && pods.is_none() {
            plan.create_on.push(name);
            continue;
        }
        let Some(pods) = pods else { continue };
        if !should_continue {
            plan.delete.extend(
                pods.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| pod_name(p)),
            );
            continue;
        }
        let mut running: Vec<&Pod> = Vec::new();
        for p in pods {
            if p.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match pod_phase(p) {
                "Failed" => {
                    // Kubelets that reject the pod fail it at once: without a back-off
                    // the controller and the kubelet would fight in a hot loop.
                    let key = format!("{uid}/{name}");
                    if let Some(d) = backoff.in_backoff(&key, now) {
                        plan.retry_after = Some(plan.retry_after.map_or(d, |r| r.min(d)));
                        continue;
                    }
                    backoff.next(&key, now);
                    plan.failed.push((pod_name(p), name.clone()));
                    plan.delete.push(pod_name(p));
                }
                "Succeeded" => plan.delete.push(pod_name(p)),
                _ => running.push(p),
            }
        }
        running.sort_by(by_age);
        if !surge {
            plan.delete
                .extend(running.iter().skip(1).map(|p| pod_name(p)));
            continue;
        }
        if running.len() <= 1 {
            if running.is_empty() && should_run {
                plan.create_on.push(name);
            }
            continue;
        }
        // Surging: the oldest new and the oldest old pod may both stay while the new
        // one is not yet available; everything else goes.
        let (mut oldest_new, mut oldest_old) = (None, None);
        for p in &running {
            let slot = if pod_hash(p) == Some(hash) {
                &mut oldest_new
            } else {
                &mut oldest_old
            };
            if slot.is_none() {
                *slot = Some(*p);
            } else {
                plan.delete.push(pod_name(p));
            }
        }
        if let (Some(n), Some(o)) = (oldest_new, oldest_old)
            && (!is_pod_ready(o) || is_pod_available(n, min_ready(ds), now))
        {
            plan.delete.push(pod_name(o));
        }
    }
    // Unscheduled pods aimed at a node that is gone can never run; scheduled ones are
    // pod GC's.
    let known: HashSet<&str> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    for (n, pods) in by_node {
        if known.contains(n.as_str()) {
            continue;
        }
        plan.delete.extend(
            pods.iter()
                .filter(|p| pod_node(p).is_none() && p.metadata.deletion_timestamp.is_none())
                .map(|p| pod_name(p)),
        );
    }
    plan
}

/// Upstream `findUpdatedPodsOnNode`: the live (new, old) pods of a node, or `None` if
/// it has more than one of either (the core loop cleans that up first).
fn updated_pods_on_node<'a>(
    pods: &[&'a Pod],
    hash: &str,
) -> Option<(Option<&'a Pod>, Option<&'a Pod>)> {
    let (mut new, mut old) = (None, None);
    for p in pods {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let slot = if pod_hash(p) == Some(hash) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(*p);
    }
    Some((new, old))
}

/// What a rolling update step does: pods to delete and nodes to surge onto.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollingPlan {
    pub delete: Vec<String>,
    pub create_on: Vec<String>,
}

/// Upstream `rollingUpdate`. Deleted pods do not count as unavailable, so an update
/// progresses while nodes are down.
pub fn plan_rolling_update(
    ds: &DaemonSet,
    nodes: &[&Node],
    by_node: &NodePods<'_>,
    hash: &str,
    now: Timestamp,
) -> Result<RollingPlan, String> {
    let min_ready = min_ready(ds);
    let available = |p: &Pod| is_pod_available(p, min_ready, now);
    // Every node that should run a pod takes part, with or without one.
    let mut all: BTreeMap<String, Vec<&Pod>> = by_node.clone();
    let mut desired = 0;
    let mut should_run: HashSet<String> = HashSet::new();
    for node in nodes {
        if node_should_run(ds, node).0 {
            let name = node.metadata.name.clone().unwrap_or_default();
            desired += 1;
            all.entry(name.clone()).or_default();
            should_run.insert(name);
        }
    }
    let mut max_unavailable =
        unavailable_count(ds, desired).map_err(|e| format!("invalid maxUnavailable: {e}"))?;
    let max_surge = surge_count(ds, desired).map_err(|e| format!("invalid maxSurge: {e}"))?;
    // An impossible configuration obeys the default of one unavailable, as upstream.
    if desired > 0 && max_unavailable == 0 && max_surge == 0 {
        max_unavailable = 1;
    }
    let mut plan = RollingPlan::default();
    if max_surge == 0 {
        let mut unavailable = 0;
        let mut candidates = Vec::new();
        for pods in all.values() {
            let Some((new, old)) = updated_pods_on_node(pods, hash) else {
                unavailable += 1;
                continue;
            };
            match (new, old) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(n), None) => {
                    if !available(n) {
                        unavailable += 1;
                    }
                }
                (None, Some(o)) => {
                    if !available(o) {
                        // Nothing is lost by replacing a pod that does not work.
                        plan.delete.push(pod_name(o));
                        unavailable += 1;
                    } else if unavailable < max_unavailable {
                        candidates.push(pod_name(o));
                    }
                }
            }
        }
        let room = (max_unavailable - unavailable).max(0) as usize;
        plan.delete.extend(candidates.into_iter().take(room));
        return Ok(plan);
    }
    let mut surged = 0;
    let mut num_available = 0;
    let mut candidates = Vec::new();
    let mut leaving = Vec::new();
    for (node, pods) in &all {
        let Some((new, old)) = updated_pods_on_node(pods, hash) else {
            surged += 1;
            continue;
        };
        if let Some(p) = old.or(new)
            && available(p)
        {
            num_available += 1;
        }
        match (new, old) {
            (_, None) => {}
            (None, Some(o)) => {
                let runs = should_run.contains(node);
                if !available(o) {
                    if !runs {
                        plan.delete.push(pod_name(o));
                    } else {
                        plan.create_on.push(node.clone());
                    }
                } else if !runs {
                    leaving.push(o);
                } else if surged < max_surge {
                    candidates.push(node.clone());
                }
            }
            (Some(n), Some(o)) => {
                if available(n) {
                    plan.delete.push(pod_name(o));
                } else {
                    surged += 1;
                }
            }
        }
    }
    // Pods on nodes that no longer qualify go only as others become available, so
    // the application is never left without its available pods.
    let deletable = (num_available - desired).max(0) as usize;
    plan.delete.extend(
        leaving
            .iter()
            .take(deletable)
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| pod_name(p)),
    );
    let room = (max_surge - surged).max(0) as usize;
    plan.create_on.extend(candidates.into_iter().take(room));
    Ok(plan)
}

/// Upstream `updateDaemonSetStatus`' counts (the oldest pod of a node speaks for it).
/// `observe` sets observedGeneration (only when the controller acted on the current
/// spec).
pub fn calculate_status(
    ds: &DaemonSet,
    nodes: &[&Node],
    by_node: &NodePods<'_>,
    hash: &str,
    now: Timestamp,
    observe: bool,
) -> DaemonSetStatus {
    let old = ds.status.clone().unwrap_or_default();
    let (mut desired, mut current, mut mis, mut ready, mut available, mut updated) =
        (0, 0, 0, 0, 0, 0);
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let pods = by_node.get(name).filter(|p| !p.is_empty());
        if node_should_run(ds, node).0 {
            desired += 1;
            let Some(pods) = pods else { continue };
            current += 1;
            let mut pods = pods.clone();
            pods.sort_by(by_age);
            let p = pods[0];
            if is_pod_ready(p) {
                ready += 1;
                if is_pod_available(p, min_ready(ds), now) {
                    available += 1;
                }
            }
            if !hash.is_empty() && pod_hash(p) == Some(hash) {
                updated += 1;
            }
        } else if pods.is_some() {
            mis += 1;
        }
    }
    DaemonSetStatus {
        current_number_scheduled: current,
        desired_number_scheduled: desired,
        number_misscheduled: mis,
        number_ready: ready,
        number_available: Some(available),
        number_unavailable: Some(desired - available),
        updated_number_scheduled: Some(updated),
        observed_generation: if observe {
            ds.metadata.generation
        } else {
            old.observed_generation
        },
        collision_count: old.collision_count,
        conditions: old.conditions,
    }
}

/// Upstream `getPatch`: what a ControllerRevision stores, the template marked to
/// replace (so applying it rolls the DaemonSet back).
pub fn history_data(ds: &DaemonSet) -> serde_json::Value {
    let mut t = serde_json::to_value(ds_template(ds)).unwrap_or_default();
    if let Some(o) = t.as_object_mut() {
        o.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// Upstream `CreatePodTemplate` + `ReplaceDaemonSetPodNodeNameNodeAffinity` +
/// `GetPodFromTemplate`: the pod for `node`.
pub fn new_daemon_pod(ds: &DaemonSet, hash: &str, node: &str) -> Pod {
    let t = ds_template(ds);
    let tm = t.metadata.unwrap_or_default();
    let mut spec = t.spec.unwrap_or_default();
    add_daemon_tolerations(&mut spec);
    spec.affinity = Some(replace_node_name_affinity(spec.affinity.take(), node));
    let mut l = tm.labels.unwrap_or_default();
    if !hash.is_empty() {
        l.insert(UNIQUE_LABEL.into(), hash.into());
    }
    let name = ds.metadata.name.as_deref().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(l),
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![new_controller_ref(
                "apps/v1",
                "DaemonSet",
                name,
                ds.metadata.uid.as_deref().unwrap_or_default(),
            )]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn status_equal(a: &DaemonSetStatus, b: &DaemonSetStatus) -> bool {
    a.current_number_scheduled == b.current_number_scheduled
        && a.desired_number_scheduled == b.desired_number_scheduled
        && a.number_misscheduled == b.number_misscheduled
        && a.number_ready == b.number_ready
        && a.number_available.unwrap_or(0) == b.number_available.unwrap_or(0)
        && a.number_unavailable.unwrap_or(0) == b.number_unavailable.unwrap_or(0)
        && a.updated_number_scheduled.unwrap_or(0) == b.updated_number_scheduled.unwrap_or(0)
        && a.observed_generation == b.observed_generation
        && a.collision_count == b.collision_count
}

// ---------------------------------------------------------------------------------
// IO: the controller
// ---------------------------------------------------------------------------------

fn now_secs() -> u64 {
    Timestamp::now().as_second().max(0) as u64
}

fn revision_of(cr: &ControllerRevision) -> i64 {
    cr.revision
}

/// The DaemonSet controller.
pub struct DaemonSetController {
    client: kube::Client,
    daemonsets: Store<DaemonSet>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    revisions: Store<ControllerRevision>,
    /// Creates and deletes in flight, tracked apart since one sync may issue both.
    creates: Arc<Expectations>,
    deletes: Arc<Expectations>,
    backoff: Mutex<FailedBackoff>,
    events: Arc<dyn EventSink>,
}

impl DaemonSetController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(DaemonSetController {
            client,
            daemonsets: factory.informer::<DaemonSet>().store(),
            pods: factory.informer::<Pod>().store(),
            nodes: factory.informer::<Node>().store(),
            revisions: factory.informer::<ControllerRevision>().store(),
            creates: Arc::new(Expectations::new()),
            deletes: Arc::new(Expectations::new()),
            backoff: Mutex::new(FailedBackoff::default()),
            events,
        })
    }

    fn satisfied(&self, key: &str) -> bool {
        let now = now_secs();
        self.creates.satisfied(key, now) && self.deletes.satisfied(key, now)
    }

    /// The key of the DaemonSet controlling `meta`, if cached.
    fn owner_key(dss: &Store<DaemonSet>, meta: &ObjectMeta) -> Option<String> {
        let r = controller_of(meta)?;
        if r.kind != "DaemonSet" {
            return None;
        }
        let ds = dss.get_by_name(meta.namespace.as_deref(), &r.name)?;
        (ds.metadata.uid.as_deref() == Some(r.uid.as_str())).then(|| object_key(&*ds))
    }

    /// The DaemonSets whose selector matches an orphan pod (candidates to adopt it).
    fn matching(dss: &Store<DaemonSet>, pod: &Pod) -> Vec<String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let l = labels(&pod.metadata);
        dss.list_namespace(ns)
            .iter()
            .filter(|d| {
                d.spec.as_ref().is_some_and(|s| {
                    !selector_is_empty(&s.selector) && selector_matches(&s.selector, &l)
                })
            })
            .map(|d| object_key(&**d))
            .collect()
    }

    /// Upstream `constructHistory`: the current revision (created, or renumbered to the
    /// newest if an old template came back) and the old ones.
    async fn history(
        &self,
        ds: &DaemonSet,
        ns: &str,
    ) -> Result<(ControllerRevision, Vec<ControllerRevision>)> {
        let uid = ds.metadata.uid.as_deref().unwrap_or_default();
        let name = ds.metadata.name.as_deref().unwrap_or_default();
        let api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), ns);
        let mut all: Vec<ControllerRevision> = self
            .revisions
            .list_namespace(ns)
            .into_iter()
            .filter(|r| controller_of(&r.metadata).is_some_and(|o| o.uid == uid))
            .map(|r| (*r).clone())
            .collect();
        all.sort_by_key(revision_of);
        let data = history_data(ds);
        let (mut current, old): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| {
            r.data
                .as_ref()
                .is_some_and(|d| crate::util::same_revision_data(&d.0, &data))
        });
        let max_old = old.iter().map(revision_of).max().unwrap_or(0);
        let cur = match current.pop() {
            Some(mut cur) => {
                // Duplicates (a race of two syncs) would split the pods between hashes.
                for dup in current {
                    let n = dup.metadata.name.clone().unwrap_or_default();
                    match api.delete(&n, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                if cur.revision <= max_old {
                    cur.revision = max_old + 1;
                    let n = cur.metadata.name.clone().unwrap_or_default();
                    cur = api.replace(&n, &PostParams::default(), &cur).await?;
                }
                cur
            }
            None => {
                let collision = ds.status.as_ref().and_then(|s| s.collision_count);
                let hash = compute_hash(&ds_template(ds), collision);
                let mut l = ds_template(ds)
                    .metadata
                    .and_then(|m| m.labels)
                    .unwrap_or_default();
                l.insert(UNIQUE_LABEL.into(), hash.clone());
                let cr = ControllerRevision {
                    metadata: ObjectMeta {
                        name: Some(revision_name(name, &hash)),
                        namespace: Some(ns.to_string()),
                        labels: Some(l),
                        annotations: ds.metadata.annotations.clone(),
                        owner_references: Some(vec![new_controller_ref(
                            "apps/v1",
                            "DaemonSet",
                            name,
                            uid,
                        )]),
                        ..Default::default()
                    },
                    data: Some(RawExtension(data.clone())),
                    revision: max_old + 1,
                };
                match api.create(&PostParams::default(), &cr).await {
                    Ok(c) => c,
                    Err(e) if is_conflict(&e) => {
                        let n = cr.metadata.name.clone().unwrap_or_default();
                        let existing = api.get(&n).await?;
                        let ours = controller_of(&existing.metadata).is_some_and(|o| o.uid == uid);
                        if ours
                            && existing
                                .data
                                .as_ref()
                                .is_some_and(|d| crate::util::same_revision_data(&d.0, &data))
                        {
                            existing
                        } else {
                            // Another template hashed to this name: hash again with a
                            // bumped collision count next time.
                            self.bump_collision(ds, ns).await?;
                            return Err(Error::Invalid(format!(
                                "hash collision for controller revision {n}"
                            )));
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok((cur, old))
    }

    async fn bump_collision(&self, ds: &DaemonSet, ns: &str) -> Result<()> {
        let name = ds.metadata.name.as_deref().unwrap_or_default();
        let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), ns);
        let mut fresh = api.get(name).await?;
        let st = fresh.status.get_or_insert_with(Default::default);
        st.collision_count = Some(st.collision_count.unwrap_or(0) + 1);
        api.replace_status(name, &PostParams::default(), &fresh)
            .await?;
        Ok(())
    }

    /// Upstream `cleanupHistory`: old revisions beyond `revisionHistoryLimit` that no
    /// live pod uses, oldest first.
    async fn cleanup_history(
        &self,
        ds: &DaemonSet,
        ns: &str,
        old: &[ControllerRevision],
        pods: &[&Pod],
    ) -> Result<()> {
        let limit = ds
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(10)
            .max(0) as usize;
        if old.len() <= limit {
            return Ok(());
        }
        let live: HashSet<&str> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| pod_hash(p))
            .collect();
        let api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), ns);
        let mut excess = old.len() - limit;
        for r in old {
            if excess == 0 {
                break;
            }
            let h = r.metadata.labels.as_ref().and_then(|l| l.get(UNIQUE_LABEL));
            if h.is_some_and(|h| live.contains(h.as_str())) {
                continue;
            }
            let n = r.metadata.name.clone().unwrap_or_default();
            match api.delete(&n, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            excess -= 1;
        }
        Ok(())
    }

    /// Upstream `getDaemonPods`: the namespace's pods that are (or become) ours.
    async fn claim(&self, ds: &DaemonSet, ns: &str) -> Result<Vec<Arc<Pod>>> {
        let uid = ds.metadata.uid.as_deref().unwrap_or_default();
        let name = ds.metadata.name.as_deref().unwrap_or_default();
        let selector = ds
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        let owner = ClaimingOwner {
            api_version: "apps/v1",
            kind: "DaemonSet",
            namespace: ns,
            name,
            uid,
            deleting: ds.metadata.deletion_timestamp.is_some(),
            adopt_finalizers: &[],
        };
        claim_pods::<DaemonSet>(&self.client, owner, self.pods.list_namespace(ns), |p| {
            !selector_is_empty(&selector) && selector_matches(&selector, &labels(&p.metadata))
        })
        .await
    }

    /// Upstream `syncNodes`: creates pods on `create_on` in slow-start batches and
    /// deletes `delete`, both capped by the burst limit and tracked by expectations.
    async fn sync_nodes(
        &self,
        ds: &DaemonSet,
        key: &str,
        delete: &[String],
        create_on: &[String],
        hash: &str,
        uids: &HashMap<String, String>,
    ) -> Result<()> {
        let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
        let pods_api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let create_on = &create_on[..create_on.len().min(BURST_REPLICAS)];
        let delete = &delete[..delete.len().min(BURST_REPLICAS)];
        let del_uids: Vec<String> = delete
            .iter()
            .map(|n| uids.get(n).cloned().unwrap_or_else(|| n.clone()))
            .collect();
        self.creates
            .expect_creations(key, create_on.len(), now_secs());
        self.deletes.expect_deletions(key, &del_uids, now_secs());
        let mut first: Option<Error> = None;
        let mut failed = 0;

        let owner = reference_to(ds);
        if !create_on.is_empty() {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let (ok, err) = slow_start_batch(create_on.len(), SLOW_START_INITIAL_BATCH, || {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let pod = new_daemon_pod(ds, hash, &create_on[i]);
                let (api, owner) = (&pods_api, &owner);
                async move {
                    create_pod(api, &pod, &*self.events, owner)
                        .await
                        .map(|_| ())
                }
            })
            .await;
            // Failed and never-attempted creates will not be observed.
            for _ in ok..create_on.len() {
                self.creates.creation_observed(key);
            }
            if let Some(e) = err {
                failed += create_on.len() - ok;
                first = Some(e.into());
            }
        }

        let results = futures::future::join_all(
            delete
                .iter()
                .map(|n| delete_pod(&pods_api, n, &*self.events, &owner)),
        )
        .await;
        for (r, uid) in results.into_iter().zip(&del_uids) {
            if let Err(e) = r {
                self.deletes.deletion_observed(key, uid);
                if !is_not_found(&e) {
                    failed += 1;
                    first.get_or_insert(e.into());
                }
            }
        }
        match first {
            None => Ok(()),
            Some(e) => Err(Error::Partial(failed, Box::new(e))),
        }
    }

    async fn write_status(&self, ds: &DaemonSet, ns: &str, status: &DaemonSetStatus) -> Result<()> {
        let api: Api<DaemonSet> = Api::namespaced(self.client.clone(), ns);
        // As upstream's `storeDaemonSetStatus`; the collision count is the copy's own.
        replace_status_retrying(&api, ds, |obj| {
            let mut st = status.clone();
            st.collision_count = obj.status.as_ref().and_then(|s| s.collision_count);
            obj.status = Some(st);
        })
        .await
    }
}

/// Upstream `ControllerRevisionName`: the prefix cut so the name stays valid.
fn revision_name(prefix: &str, hash: &str) -> String {
    let prefix = if prefix.len() > 223 {
        &prefix[..223]
    } else {
        prefix
    };
    format!("{prefix}-{hash}")
}

#[async_trait::async_trait]
impl Controller for DaemonSetController {
    fn name(&self) -> &'static str {
        "daemonset"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        let (creates, deletes) = (self.creates.clone(), self.deletes.clone());
        factory.informer::<DaemonSet>().add_event_handler(
            move |n: Notification<DaemonSet>| {
                let key = object_key(&**n.object());
                if let Notification::Deleted { .. } = n {
                    creates.delete(&key);
                    deletes.delete(&key);
                    return;
                }
                q.add(key);
            },
            None,
        );

        let q = queue.clone();
        let (creates, deletes) = (self.creates.clone(), self.deletes.clone());
        let dss = self.daemonsets.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| {
                let deleted = |pod: &Pod| {
                    if let Some(k) = Self::owner_key(&dss, &pod.metadata) {
                        deletes
                            .deletion_observed(&k, pod.metadata.uid.as_deref().unwrap_or_default());
                        q.add(k);
                    }
                };
                match n {
                    Notification::Added { obj, .. } => {
                        if obj.metadata.deletion_timestamp.is_some() {
                            deleted(&obj);
                        } else if let Some(k) = Self::owner_key(&dss, &obj.metadata) {
                            creates.creation_observed(&k);
                            q.add(k);
                        } else if controller_of(&obj.metadata).is_none() {
                            for k in Self::matching(&dss, &obj) {
                                q.add(k);
                            }
                        }
                    }
                    Notification::Updated { old, new } => {
                        if old.metadata.resource_version == new.metadata.resource_version {
                            return;
                        }
                        if new.metadata.deletion_timestamp.is_some() {
                            deleted(&new);
                            return;
                        }
                        let old_ref = controller_of(&old.metadata).map(|r| r.uid.clone());
                        let new_ref = controller_of(&new.metadata).map(|r| r.uid.clone());
                        if old_ref != new_ref
                            && let Some(k) = Self::owner_key(&dss, &old.metadata)
                        {
                            q.add(k);
                        }
                        if let Some(k) = Self::owner_key(&dss, &new.metadata) {
                            // A pod turning ready becomes available after minReadySeconds.
                            if !is_pod_ready(&old)
                                && is_pod_ready(&new)
                                && let Some(ds) = dss.get(&k)
                                && min_ready(&ds) > 0
                            {
                                let secs = min_ready(&ds) as u64 + 1;
                                q.add_after(k.clone(), Duration::from_secs(secs));
                            }
                            q.add(k);
                        } else if new_ref.is_none() {
                            for k in Self::matching(&dss, &new) {
                                q.add(k);
                            }
                        }
                    }
                    Notification::Deleted { obj, .. } => deleted(&obj),
                }
            },
            None,
        );

        // A node change matters to a DaemonSet when it changes where it should run.
        let q = queue.clone();
        let dss = self.daemonsets.clone();
        factory.informer::<Node>().add_event_handler(
            move |n: Notification<Node>| {
                let all = dss.list();
                match n {
                    Notification::Updated { old, new } => {
                        if old.metadata.resource_version == new.metadata.resource_version {
                            return;
                        }
                        for ds in all {
                            if node_should_run(&ds, &old) != node_should_run(&ds, &new) {
                                q.add(object_key(&*ds));
                            }
                        }
                    }
                    // Added: maybe a new home; deleted: unscheduled pods aimed at it go.
                    _ => {
                        for ds in all {
                            q.add(object_key(&*ds));
                        }
                    }
                }
            },
            None,
        );

        let q = queue.clone();
        let dss = self.daemonsets.clone();
        factory.informer::<ControllerRevision>().add_event_handler(
            move |n: Notification<ControllerRevision>| {
                if let Some(k) = Self::owner_key(&dss, &n.object().metadata) {
                    q.add(k);
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let (ns, _) = split_key(key);
        let ns = ns.ok_or_else(|| Error::Invalid(format!("key {key:?} has no namespace")))?;
        let Some(ds) = self.daemonsets.get(key) else {
            self.creates.delete(key);
            self.deletes.delete(key);
            return Ok(Action::Done);
        };
        let ds: &DaemonSet = &ds;
        let selector = ds
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        if selector_is_empty(&selector) {
            emit(
                &*self.events,
                ds,
                EventType::Warning,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required."
                    .to_string(),
            );
            return Ok(Action::Done);
        }
        if ds.metadata.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        let now = Timestamp::now();
        let nodes = self.nodes.list();
        let nodes: Vec<&Node> = nodes.iter().map(|n| &**n).collect();
        let (cur, old) = self.history(ds, ns).await?;
        let hash = cur
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(UNIQUE_LABEL))
            .cloned()
            .unwrap_or_else(|| {
                compute_hash(
                    &ds_template(ds),
                    ds.status.as_ref().and_then(|s| s.collision_count),
                )
            });
        let owned = self.claim(ds, ns).await?;
        let pods: Vec<&Pod> = owned.iter().map(|p| &**p).collect();
        let uids: HashMap<String, String> = pods
            .iter()
            .map(|p| (pod_name(p), p.metadata.uid.clone().unwrap_or_default()))
            .collect();
        let by_node = group_by_node(&pods);

        let mut action = Action::Done;
        let mut sync_error = None;
        let observe = self.satisfied(key);
        if observe {
            let plan = {
                let mut b = self.backoff.lock();
                b.gc(now);
                plan_manage(ds, &nodes, &by_node, &hash, now, &mut b)
            };
            if let Some(d) = plan.retry_after {
                action = action.min(Action::RequeueAfter(d));
            }
            for (pod, node) in &plan.failed {
                emit(
                    &*self.events,
                    ds,
                    EventType::Warning,
                    "FailedDaemonPod",
                    format!(
                        "Found failed daemon pod {ns}/{pod} on node {node}, will try to kill it"
                    ),
                );
            }
            let idle = plan.create_on.is_empty() && plan.delete.is_empty();
            if !idle {
                sync_error = self
                    .sync_nodes(ds, key, &plan.delete, &plan.create_on, &hash, &uids)
                    .await
                    .err();
            } else if is_rolling_update(ds) {
                // The rolling update only runs once the core loop has nothing to do,
                // as upstream (whose expectations are unsatisfied after any write).
                match plan_rolling_update(ds, &nodes, &by_node, &hash, now) {
                    Ok(r) if !r.delete.is_empty() || !r.create_on.is_empty() => {
                        sync_error = self
                            .sync_nodes(ds, key, &r.delete, &r.create_on, &hash, &uids)
                            .await
                            .err();
                    }
                    Ok(_) => {}
                    Err(e) => sync_error = Some(Error::Invalid(e)),
                }
            }
            if sync_error.is_none() {
                self.cleanup_history(ds, ns, &old, &pods).await?;
            }
        }

        let status = calculate_status(ds, &nodes, &by_node, &hash, now, observe);
        if !status_equal(&status, &ds.status.clone().unwrap_or_default()) {
            self.write_status(ds, ns, &status).await?;
        }
        if let Some(e) = sync_error {
            return Err(e);
        }
        let mr = min_ready(ds);
        if mr > 0 && status.number_ready != status.number_available.unwrap_or(0) {
            action = action.min(Action::RequeueAfter(Duration::from_secs(mr as u64)));
        }
        Ok(action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints}
        }))
        .unwrap()
    }

    fn ds(spec: serde_json::Value) -> DaemonSet {
        let mut v = json!({
            "metadata": {"name": "ds", "namespace": "ns", "uid": "ds-uid", "generation": 4},
            "spec": {
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}},
                             "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
            }
        });
        for (k, val) in spec.as_object().into_iter().flatten() {
            if k == "podSpec" {
                for (pk, pv) in val.as_object().into_iter().flatten() {
                    v["spec"]["template"]["spec"][pk] = pv.clone();
                }
            } else {
                v["spec"][k] = val.clone();
            }
        }
        serde_json::from_value(v).unwrap()
    }

    struct P {
        name: &'static str,
        node: &'static str,
        hash: &'static str,
        phase: &'static str,
        ready_since: Option<i64>,
        created: i64,
        deleting: bool,
        scheduled: bool,
    }

    fn p(name: &'static str, node: &'static str, hash: &'static str) -> P {
        P {
            name,
            node,
            hash,
            phase: "Running",
            ready_since: Some(0),
            created: 0,
            deleting: false,
            scheduled: true,
        }
    }

    fn pod(x: P) -> Pod {
        let mut v = json!({
            "metadata": {"name": x.name, "namespace": "ns", "uid": format!("uid-{}", x.name),
                         "labels": {"app": "d", UNIQUE_LABEL: x.hash},
                         "creationTimestamp": ts(x.created).to_string()},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "affinity": replace_node_name_affinity(None, x.node)},
            "status": {"phase": x.phase}
        });
        if x.scheduled {
            v["spec"]["nodeName"] = json!(x.node);
        }
        if let Some(r) = x.ready_since {
            v["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
                "lastTransitionTime": ts(r).to_string()}]);
        }
        if x.deleting {
            v["metadata"]["deletionTimestamp"] = json!(ts(1).to_string());
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn eligibility_follows_node_should_run_daemon_pod() {
        let plain = node("n", json!({"zone": "a"}), json!(null));
        let cases: Vec<(&str, DaemonSet, Node, (bool, bool))> = vec![
            ("plain node", ds(json!({})), plain.clone(), (true, true)),
            (
                "nodeSelector matches",
                ds(json!({"podSpec": {"nodeSelector": {"zone": "a"}}})),
                plain.clone(),
                (true, true),
            ),
            (
                "nodeSelector differs",
                ds(json!({"podSpec": {"nodeSelector": {"zone": "b"}}})),
                plain.clone(),
                (false, false),
            ),
            (
                "template nodeName elsewhere",
                ds(json!({"podSpec": {"nodeName": "other"}})),
                plain.clone(),
                (false, false),
            ),
            (
                "required affinity NotIn",
                ds(json!({"podSpec": {"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]}}}}})),
                plain.clone(),
                (false, false),
            ),
            (
                "required affinity: one term of two, Gt",
                ds(json!({"podSpec": {"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
                        {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]}]}}}}})),
                node("n", json!({"cores": "8"}), json!(null)),
                (true, true),
            ),
            (
                "matchFields by name",
                ds(json!({"podSpec": {"affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["m"]}]}]}}}}})),
                plain.clone(),
                (false, false),
            ),
            (
                "untolerated NoSchedule: keeps running pods",
                ds(json!({})),
                node(
                    "n",
                    json!({}),
                    json!([{"key": "dedicated", "effect": "NoSchedule"}]),
                ),
                (false, true),
            ),
            (
                "untolerated NoExecute: evicted",
                ds(json!({})),
                node(
                    "n",
                    json!({}),
                    json!([{"key": "dedicated", "effect": "NoExecute"}]),
                ),
                (false, false),
            ),
            (
                "tolerated taint",
                ds(
                    json!({"podSpec": {"tolerations": [{"key": "dedicated", "operator": "Equal",
                    "value": "x", "effect": "NoSchedule"}]}}),
                ),
                node(
                    "n",
                    json!({}),
                    json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
                ),
                (true, true),
            ),
            (
                "PreferNoSchedule taints do not count",
                ds(json!({})),
                node(
                    "n",
                    json!({}),
                    json!([{"key": "k", "effect": "PreferNoSchedule"}]),
                ),
                (true, true),
            ),
            (
                "default tolerations: not-ready, unschedulable",
                ds(json!({})),
                node(
                    "n",
                    json!({}),
                    json!([
                    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
                ),
                (false, true),
            ),
            (
                "network-unavailable only tolerated with hostNetwork",
                ds(json!({"podSpec": {"hostNetwork": true}})),
                node(
                    "n",
                    json!({}),
                    json!([
                    {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
                ),
                (true, true),
            ),
            (
                "network-unavailable without hostNetwork",
                ds(json!({})),
                node(
                    "n",
                    json!({}),
                    json!([
                    {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]),
                ),
                (false, true),
            ),
        ];
        for (what, d, n, want) in cases {
            assert_eq!(node_should_run(&d, &n), want, "{what}");
        }
        let mut gone = plain.clone();
        gone.metadata.deletion_timestamp = Some(Time(ts(1)));
        assert_eq!(node_should_run(&ds(json!({})), &gone), (false, true));
    }

    #[test]
    fn tolerations_are_added_once_and_replace_equal_ones() {
        let mut spec: PodSpec = serde_json::from_value(json!({"containers": [],
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 30},
                            {"key": "mine", "operator": "Exists"}]}))
        .unwrap();
        add_daemon_tolerations(&mut spec);
        add_daemon_tolerations(&mut spec);
        let t = spec.tolerations.unwrap();
        assert_eq!(t.len(), 7);
        let unreachable = t
            .iter()
            .find(|t| t.key.as_deref() == Some("node.kubernetes.io/unreachable"))
            .unwrap();
        assert_eq!(unreachable.toleration_seconds, None);
        assert!(t.iter().any(|t| t.key.as_deref() == Some("mine")));
    }

    #[test]
    fn node_name_affinity_replaces_required_terms() {
        let before: Affinity = serde_json::from_value(json!({
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["old"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": "a", "operator": "Exists"}]}}]},
            "podAntiAffinity": {}
        }))
        .unwrap();
        let cases = [
            ("none", None),
            ("empty", Some(Affinity::default())),
            ("existing", Some(before)),
        ];
        for (what, a) in cases {
            let had_preferred = a
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .is_some_and(|n| {
                    n.preferred_during_scheduling_ignored_during_execution
                        .is_some()
                });
            let out = replace_node_name_affinity(a, "n1");
            let na = out.node_affinity.as_ref().unwrap();
            let terms = &na
                .required_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()
                .node_selector_terms;
            assert_eq!(terms.len(), 1, "{what}");
            let f = &terms[0].match_fields.as_ref().unwrap()[0];
            assert_eq!(
                (f.key.as_str(), f.operator.as_str(), f.values.clone()),
                ("metadata.name", "In", Some(vec!["n1".to_string()])),
                "{what}"
            );
            assert_eq!(
                na.preferred_during_scheduling_ignored_during_execution
                    .is_some(),
                had_preferred,
                "{what}"
            );
            // The pod aims at the node before it is scheduled.
            let pod = Pod {
                spec: Some(PodSpec {
                    affinity: Some(out),
                    ..Default::default()
                }),
                ..Default::default()
            };
            assert_eq!(target_node(&pod).as_deref(), Some("n1"), "{what}");
        }
    }

    #[test]
    fn new_pods_carry_hash_ref_tolerations_and_affinity() {
        let p = new_daemon_pod(&ds(json!({})), "h1", "n1");
        assert_eq!(p.metadata.generate_name.as_deref(), Some("ds-"));
        let l = p.metadata.labels.as_ref().unwrap();
        assert_eq!((l["app"].as_str(), l[UNIQUE_LABEL].as_str()), ("d", "h1"));
        let r = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (r.kind.as_str(), r.uid.as_str(), r.controller),
            ("DaemonSet", "ds-uid", Some(true))
        );
        assert_eq!(target_node(&p).as_deref(), Some("n1"));
        assert_eq!(p.spec.unwrap().tolerations.unwrap().len(), 6);
    }

    #[test]
    fn template_hash_is_stable_and_history_data_replaces() {
        let a = ds(json!({}));
        let b = ds(json!({}));
        let t = |d: &DaemonSet| compute_hash(&ds_template(d), None);
        assert_eq!(t(&a), t(&b));
        let c = ds(json!({"podSpec": {"containers": [{"name": "c", "image": "i:2"}]}}));
        assert_ne!(t(&a), t(&c));
        assert_ne!(
            compute_hash(&ds_template(&a), Some(1)),
            t(&a),
            "a collision count changes the hash"
        );
        let data = history_data(&a);
        assert_eq!(data["spec"]["template"]["$patch"], json!("replace"));
        assert_eq!(data, history_data(&b));
        assert_ne!(data, history_data(&c));
        assert_eq!(revision_name("ds", "abc"), "ds-abc");
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
    }

    fn names(v: &[String]) -> Vec<&str> {
        let mut v: Vec<&str> = v.iter().map(String::as_str).collect();
        v.sort();
        v
    }

    #[test]
    fn manage_plans_creates_and_deletes() {
        let d = ds(json!({"podSpec": {"nodeSelector": {"run": "yes"}}}));
        let yes = |n: &str| node(n, json!({"run": "yes"}), json!(null));
        let nodes = [
            yes("empty"),
            yes("double"),
            node("wrong", json!({}), json!(null)),
            yes("failed"),
            yes("done"),
            yes("fine"),
            yes("deleting"),
        ];
        let nrefs: Vec<&Node> = nodes.iter().collect();
        let pods = vec![
            pod(P {
                created: 5,
                ..p("double-new", "double", "h")
            }),
            pod(P {
                created: 1,
                ..p("double-old", "double", "h")
            }),
            pod(p("misplaced", "wrong", "h")),
            pod(P {
                phase: "Failed",
                ..p("broken", "failed", "h")
            }),
            pod(P {
                phase: "Succeeded",
                ..p("finished", "done", "h")
            }),
            pod(p("ok", "fine", "h")),
            pod(P {
                deleting: true,
                ..p("going", "deleting", "h")
            }),
            pod(P {
                scheduled: false,
                ..p("lost", "vanished-node", "h")
            }),
            pod(p("stranded", "vanished-node-2", "h")),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let by_node = group_by_node(&refs);
        let mut b = FailedBackoff::default();
        let plan = plan_manage(&d, &nrefs, &by_node, "h", ts(100), &mut b);
        assert_eq!(names(&plan.create_on), vec!["empty"]);
        assert_eq!(
            names(&plan.delete),
            vec!["broken", "double-new", "finished", "lost", "misplaced"]
        );
        assert_eq!(
            plan.failed,
            vec![("broken".to_string(), "failed".to_string())]
        );
        assert_eq!(plan.retry_after, None);

        // A second failure on the node within the back-off is held back.
        let again = plan_manage(&d, &nrefs, &by_node, "h", ts(100), &mut b);
        assert!(!again.delete.contains(&"broken".to_string()));
        assert_eq!(again.retry_after, Some(Duration::from_secs(1)));
        // After it, deleted again, and the next delay doubles.
        let later = plan_manage(&d, &nrefs, &by_node, "h", ts(102), &mut b);
        assert!(later.delete.contains(&"broken".to_string()));
        assert_eq!(
            b.in_backoff("ds-uid/failed", ts(102)),
            Some(Duration::from_secs(2))
        );
        b.gc(ts(102 + 3600));
        assert_eq!(b.in_backoff("ds-uid/failed", ts(102 + 3600)), None);

        // A node being deleted is not a reason to make a pod there.
        let mut gone = yes("gone");
        gone.metadata.deletion_timestamp = Some(Time(ts(1)));
        let plan = plan_manage(&d, &[&gone], &NodePods::new(), "h", ts(100), &mut b);
        assert!(plan.create_on.is_empty());
    }

    #[test]
    fn manage_with_surge_keeps_one_old_until_the_new_is_available() {
        let d = ds(json!({"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}));
        let n = node("n", json!({}), json!(null));
        let cases: Vec<(&str, Vec<P>, Vec<&str>)> = vec![
            (
                "new not ready yet: both stay",
                vec![
                    p("old", "n", "h0"),
                    P {
                        ready_since: None,
                        created: 5,
                        ..p("new", "n", "h")
                    },
                ],
                vec![],
            ),
            (
                "new available: old goes",
                vec![
                    p("old", "n", "h0"),
                    P {
                        created: 5,
                        ..p("new", "n", "h")
                    },
                ],
                vec!["old"],
            ),
            (
                "old not ready: old goes",
                vec![
                    P {
                        ready_since: None,
                        ..p("old", "n", "h0")
                    },
                    P {
                        ready_since: None,
                        created: 5,
                        ..p("new", "n", "h")
                    },
                ],
                vec!["old"],
            ),
            (
                "extra new pods go",
                vec![
                    P {
                        created: 1,
                        ..p("new1", "n", "h")
                    },
                    P {
                        created: 2,
                        ..p("new2", "n", "h")
                    },
                ],
                vec!["new2"],
            ),
        ];
        for (what, ps, want) in cases {
            let pods: Vec<Pod> = ps.into_iter().map(pod).collect();
            let refs: Vec<&Pod> = pods.iter().collect();
            let plan = plan_manage(
                &d,
                &[&n],
                &group_by_node(&refs),
                "h",
                ts(100),
                &mut FailedBackoff::default(),
            );
            assert_eq!(names(&plan.delete), want, "{what}");
            assert!(plan.create_on.is_empty(), "{what}");
        }
    }

    #[test]
    fn rolling_update_respects_max_unavailable() {
        let nodes: Vec<Node> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| node(n, json!({}), json!(null)))
            .collect();
        let nrefs: Vec<&Node> = nodes.iter().collect();
        let all_old = || {
            vec![
                pod(p("pa", "a", "old")),
                pod(p("pb", "b", "old")),
                pod(p("pc", "c", "old")),
                pod(p("pd", "d", "old")),
            ]
        };
        let run = |d: &DaemonSet, pods: &[Pod]| {
            let refs: Vec<&Pod> = pods.iter().collect();
            let plan =
                plan_rolling_update(d, &nrefs, &group_by_node(&refs), "new", ts(100)).unwrap();
            assert!(plan.create_on.is_empty());
            plan.delete.len()
        };
        // Default: one at a time.
        assert_eq!(run(&ds(json!({})), &all_old()), 1);
        // 50% of 4 nodes.
        let half = ds(json!({"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "50%"}}}));
        assert_eq!(run(&half, &all_old()), 2);
        // A node without a pod already uses the one unavailable slot.
        let mut missing = all_old();
        missing.remove(0);
        assert_eq!(run(&ds(json!({})), &missing), 0);
        // An unavailable new pod blocks further progress.
        let mut blocked = all_old();
        blocked[0] = pod(P {
            ready_since: None,
            ..p("pa", "a", "new")
        });
        assert_eq!(run(&ds(json!({})), &blocked), 0);
        // An available new pod frees the slot.
        blocked[0] = pod(p("pa", "a", "new"));
        assert_eq!(run(&ds(json!({})), &blocked), 1);
        // An unavailable old pod is replaced regardless of the budget.
        let mut broken = all_old();
        broken[1] = pod(P {
            ready_since: None,
            ..p("pb", "b", "old")
        });
        broken[2] = pod(P {
            ready_since: None,
            ..p("pc", "c", "old")
        });
        let refs: Vec<&Pod> = broken.iter().collect();
        let plan = plan_rolling_update(
            &ds(json!({})),
            &nrefs,
            &group_by_node(&refs),
            "new",
            ts(100),
        )
        .unwrap();
        assert_eq!(names(&plan.delete), vec!["pb", "pc"]);
        // maxUnavailable 0 and maxSurge 0 fall back to one.
        let zero = ds(json!({"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0}}}));
        assert_eq!(run(&zero, &all_old()), 1);
        // Deleted pods count as gone: the node then counts as one without a pod.
        let mut deleting = all_old();
        deleting[0] = pod(P {
            deleting: true,
            ..p("pa", "a", "old")
        });
        assert_eq!(run(&ds(json!({})), &deleting), 0);
    }

    #[test]
    fn rolling_update_with_surge_creates_next_to_old_pods() {
        let d = ds(json!({"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}));
        let nodes: Vec<Node> = ["a", "b", "c"]
            .iter()
            .map(|n| node(n, json!({}), json!(null)))
            .collect();
        let nrefs: Vec<&Node> = nodes.iter().collect();
        let plan_of = |pods: Vec<Pod>| {
            let refs: Vec<&Pod> = pods.iter().collect();
            plan_rolling_update(&d, &nrefs, &group_by_node(&refs), "new", ts(100)).unwrap()
        };
        let plan = plan_of(vec![
            pod(p("pa", "a", "old")),
            pod(p("pb", "b", "old")),
            pod(p("pc", "c", "old")),
        ]);
        assert!(plan.delete.is_empty());
        assert_eq!(plan.create_on, vec!["a"]);
        // A new pod waiting to be available uses the surge.
        let plan = plan_of(vec![
            pod(p("pa", "a", "old")),
            pod(P {
                ready_since: None,
                ..p("na", "a", "new")
            }),
            pod(p("pb", "b", "old")),
        ]);
        assert_eq!((plan.delete.len(), plan.create_on.len()), (0, 0));
        // Once available, its old pod goes.
        let plan = plan_of(vec![
            pod(p("pa", "a", "old")),
            pod(p("na", "a", "new")),
            pod(p("pb", "b", "old")),
        ]);
        assert_eq!(plan.delete, vec!["pa"]);
        assert_eq!(plan.create_on, vec!["b"]);
        // An unavailable old pod gets its replacement regardless of the surge.
        let plan = plan_of(vec![
            pod(P {
                ready_since: None,
                ..p("pa", "a", "old")
            }),
            pod(P {
                ready_since: None,
                ..p("pb", "b", "old")
            }),
        ]);
        assert_eq!(names(&plan.create_on), vec!["a", "b"]);
    }

    #[test]
    fn status_counts_nodes() {
        let d = ds(json!({"minReadySeconds": 10, "podSpec": {"nodeSelector": {"run": "yes"}}}));
        let yes = |n: &str| node(n, json!({"run": "yes"}), json!(null));
        let nodes = [
            yes("a"),
            yes("b"),
            yes("c"),
            yes("d"),
            node("e", json!({}), json!(null)),
        ];
        let nrefs: Vec<&Node> = nodes.iter().collect();
        let pods = [
            pod(p("pa", "a", "h")), // ready, available, updated
            pod(P {
                ready_since: Some(95),
                ..p("pb", "b", "h")
            }), // ready, not yet available
            pod(P {
                ready_since: None,
                ..p("pc", "c", "old")
            }), // not ready, old
            pod(p("pe", "e", "h")), // misscheduled
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let st = calculate_status(&d, &nrefs, &group_by_node(&refs), "h", ts(100), true);
        assert_eq!(
            (
                st.desired_number_scheduled,
                st.current_number_scheduled,
                st.number_misscheduled,
                st.number_ready,
                st.number_available,
                st.number_unavailable,
                st.updated_number_scheduled,
                st.observed_generation,
            ),
            (4, 3, 1, 2, Some(1), Some(3), Some(2), Some(4))
        );
        let unobserved = calculate_status(&d, &nrefs, &group_by_node(&refs), "h", ts(100), false);
        assert_eq!(unobserved.observed_generation, None);
    }

    #[test]
    fn expectations_stop_double_creates_across_syncs() {
        // Two expectation sets, as the controller keeps them: a sync that created pods
        // is not followed by another create until the informer shows them.
        let creates = Expectations::new();
        let deletes = Expectations::new();
        let d = ds(json!({}));
        let n = node("n", json!({}), json!(null));
        let mut cache: Vec<Pod> = Vec::new();
        let mut created = 0;
        for round in 0..10 {
            if creates.satisfied("k", 0) && deletes.satisfied("k", 0) {
                let refs: Vec<&Pod> = cache.iter().collect();
                let plan = plan_manage(
                    &d,
                    &[&n],
                    &group_by_node(&refs),
                    "h",
                    ts(0),
                    &mut FailedBackoff::default(),
                );
                creates.expect_creations("k", plan.create_on.len(), 0);
                deletes.expect_deletions("k", &[], 0);
                created += plan.create_on.len();
            }
            if round == 5 {
                cache.push(pod(p("x", "n", "h")));
                creates.creation_observed("k");
            }
        }
        assert_eq!(created, 1);
    }
}
