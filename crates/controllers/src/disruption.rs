//! The disruption controller (upstream `pkg/controller/disruption`): the status of
//! every PodDisruptionBudget, which the `pods/eviction` subresource reads.
//!
//! For each budget: the pods it selects, the number of pods expected (the selected
//! pods for an integer `minAvailable`, else the summed scale of their controllers:
//! Deployments, ReplicaSets, ReplicationControllers, StatefulSets), the healthy
//! (ready, not deleting, not recently evicted) pods, and from those `desiredHealthy`
//! and `disruptionsAllowed`, the `DisruptionAllowed` condition and `observedGeneration`.
//! Evictions recorded by the apiserver in `status.disruptedPods` are held out of the
//! healthy count until their pod is deleted or two minutes pass. A budget that cannot
//! be computed (a pod without a known controller) fails safe: no disruptions,
//! `SyncFailed`. A second key space (`pod:<ns>/<name>`) resets a pod's
//! `DisruptionTarget` condition when the eviction that set it never deleted it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ferrokube_api::pdb::{
    DELETION_TIMEOUT_SECS, DISRUPTION_TARGET_CONDITION, conditions_are_up_to_date,
    set_sync_failed_condition, update_disruption_allowed_condition,
};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, key_of, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::replicaset::is_not_found;
use crate::util::{
    controller_of, is_pod_ready, is_pod_terminal, pod_condition, scaled_value, selector_matches,
};
use crate::{Action, Controller, Result, done_unless_failed, split_key};

/// Prefix of the keys of pods whose `DisruptionTarget` condition may be stale.
const POD_KEY_PREFIX: &str = "pod:";
/// Upstream `stalePodDisruptionTimeout`: a pod marked by an eviction but not deleted
/// after this long gets its condition reset.
pub const STALE_POD_DISRUPTION_TIMEOUT: Duration = Duration::from_secs(120);

/// A workload controller of selected pods and its desired replicas
/// (upstream `controllerAndScale`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerScale {
    pub uid: String,
    pub replicas: i32,
}

/// The counts a budget's status is computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub expected_pods: i32,
    pub desired_healthy: i32,
    /// Selected pods with no controller (they do not count towards a percentage).
    pub unmanaged: Vec<String>,
}

/// The pods of the budget's namespace its selector selects (`policy/v1`: a missing
/// selector selects nothing, an empty one everything).
pub fn selected_pods<'a>(pdb: &PodDisruptionBudget, pods: &[&'a Pod]) -> Vec<&'a Pod> {
    let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return Vec::new();
    };
    let ns = pdb.metadata.namespace.as_deref().unwrap_or_default();
    pods.iter()
        .copied()
        .filter(|p| p.metadata.namespace.as_deref().unwrap_or_default() == ns)
        .filter(|p| selector_matches(sel, p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
        .collect()
}

/// Upstream `getExpectedScale`: the summed scale of the selected pods' controllers,
/// each counted once; `find` resolves a pod's controllerRef.
pub fn expected_scale(
    pods: &[&Pod],
    find: &dyn Fn(&OwnerReference, &str) -> Option<ControllerScale>,
) -> Result<(i32, Vec<String>), String> {
    let mut scales: HashMap<String, i32> = HashMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(cref) = controller_of(&pod.metadata) else {
            unmanaged.push(name);
            continue;
        };
        if scales.contains_key(&cref.uid) {
            continue;
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        match find(cref, ns) {
            Some(s) => {
                scales.insert(s.uid, s.replicas);
            }
            None => return Err(format!("found no controllers for pod {name:?}")),
        }
    }
    Ok((scales.values().sum(), unmanaged))
}

/// Upstream `getExpectedPodCount`.
pub fn expected_count(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    find: &dyn Fn(&OwnerReference, &str) -> Option<ControllerScale>,
) -> Result<Expected, String> {
    let spec = pdb.spec.clone().unwrap_or_default();
    if let Some(max_unavailable) = &spec.max_unavailable {
        let (expected, unmanaged) = expected_scale(pods, find)?;
        let max = scaled_value(Some(max_unavailable), expected, true)?;
        return Ok(Expected {
            expected_pods: expected,
            desired_healthy: (expected - max).max(0),
            unmanaged,
        });
    }
    match &spec.min_available {
        Some(IntOrString::Int(n)) => Ok(Expected {
            expected_pods: pods.len() as i32,
            desired_healthy: *n,
            unmanaged: Vec::new(),
        }),
        Some(min @ IntOrString::String(_)) => {
            let (expected, unmanaged) = expected_scale(pods, find)?;
            Ok(Expected {
                expected_pods: expected,
                desired_healthy: scaled_value(Some(min), expected, true)?,
                unmanaged,
            })
        }
        None => Ok(Expected {
            expected_pods: 0,
            desired_healthy: 0,
            unmanaged: Vec::new(),
        }),
    }
}

/// Upstream `buildDisruptedPodMap`: the recorded evictions still awaited at `now`, and
/// when the earliest of them times out. Evictions of deleting or vanished pods drop out.
pub fn disrupted_pods(
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
    now: Timestamp,
) -> (BTreeMap<String, Time>, Option<i64>, Vec<String>) {
    let mut kept = BTreeMap::new();
    let mut recheck: Option<i64> = None;
    let mut expired = Vec::new();
    let Some(recorded) = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref()) else {
        return (kept, recheck, expired);
    };
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(at) = recorded.get(&name) else {
            continue;
        };
        let deadline = at.0.as_second() + DELETION_TIMEOUT_SECS;
        if deadline < now.as_second() {
            expired.push(name);
        } else {
            let left = deadline - now.as_second();
            recheck = Some(recheck.map_or(left, |r| r.min(left)));
            kept.insert(name, at.clone());
        }
    }
    (kept, recheck, expired)
}

/// Upstream `countHealthyPods`: ready pods, not deleting, not awaiting an eviction.
pub fn count_healthy(pods: &[&Pod], disrupted: &BTreeMap<String, Time>, now: Timestamp) -> i32 {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            disrupted
                .get(name)
                .is_none_or(|t| t.0.as_second() + DELETION_TIMEOUT_SECS <= now.as_second())
        })
        .filter(|p| is_pod_ready(p))
        .count() as i32
}

/// Upstream `updatePdbStatus`: the budget with its new status, or `None` when the
/// stored one is already current.
pub fn updated_status(
    pdb: &PodDisruptionBudget,
    current_healthy: i32,
    expected: &Expected,
    disrupted: BTreeMap<String, Time>,
    now: Timestamp,
) -> Option<PodDisruptionBudget> {
    // No disruption before any pod is expected: a budget matching no pods yet must be
    // safe when its first pods appear.
    let mut allowed = current_healthy - expected.desired_healthy;
    if expected.expected_pods <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let old = pdb.status.clone().unwrap_or_default();
    let disrupted = (!disrupted.is_empty()).then_some(disrupted);
    let same_disrupted = old.disrupted_pods.clone().filter(|m| !m.is_empty()) == disrupted;
    if old.current_healthy == current_healthy
        && old.desired_healthy == expected.desired_healthy
        && old.expected_pods == expected.expected_pods
        && old.disruptions_allowed == allowed
        && same_disrupted
        && old.observed_generation == pdb.metadata.generation
        && conditions_are_up_to_date(pdb)
    {
        return None;
    }
    let mut new = pdb.clone();
    new.status = Some(PodDisruptionBudgetStatus {
        current_healthy,
        desired_healthy: expected.desired_healthy,
        expected_pods: expected.expected_pods,
        disruptions_allowed: allowed,
        disrupted_pods: disrupted,
        observed_generation: pdb.metadata.generation,
        conditions: old.conditions,
    });
    update_disruption_allowed_condition(&mut new, now);
    Some(new)
}

/// Upstream `failSafe`: no disruptions and a `SyncFailed` condition.
pub fn fail_safe(pdb: &PodDisruptionBudget, error: String, now: Timestamp) -> PodDisruptionBudget {
    let mut new = pdb.clone();
    new.status
        .get_or_insert_with(Default::default)
        .disruptions_allowed = 0;
    set_sync_failed_condition(&mut new, error, now);
    new
}

/// Upstream `nonTerminatingPodHasStaleDisruptionCondition`: `Some(wait)` when the pod
/// carries an eviction's `DisruptionTarget` condition but is not being deleted; the
/// condition is stale once `wait` is zero.
pub fn stale_disruption_wait(pod: &Pod, now: Timestamp) -> Option<Duration> {
    if pod.metadata.deletion_timestamp.is_some() || is_pod_terminal(pod) {
        return None;
    }
    let c = pod_condition(pod, DISRUPTION_TARGET_CONDITION)?;
    // The kubelet's own disruption conditions are never stale.
    if c.status != "True" || c.reason.as_deref() == Some("TerminationByKubelet") {
        return None;
    }
    let since = c
        .last_transition_time
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    let left = since + STALE_POD_DISRUPTION_TIMEOUT.as_secs() as i64 - now.as_second();
    Some(Duration::from_secs(left.max(0) as u64))
}

/// The disruption controller.
pub struct DisruptionController {
    client: kube::Client,
    events: Arc<dyn EventSink>,
    pdbs: Store<PodDisruptionBudget>,
    pods: Store<Pod>,
    replicasets: Store<ReplicaSet>,
    deployments: Store<Deployment>,
    rcs: Store<ReplicationController>,
    statefulsets: Store<StatefulSet>,
}

impl DisruptionController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(DisruptionController {
            client,
            events,
            pdbs: factory.informer::<PodDisruptionBudget>().store(),
            pods: factory.informer::<Pod>().store(),
            replicasets: factory.informer::<ReplicaSet>().store(),
            deployments: factory.informer::<Deployment>().store(),
            rcs: factory.informer::<ReplicationController>().store(),
            statefulsets: factory.informer::<StatefulSet>().store(),
        })
    }

    /// Upstream's finders (`getPodReplicaSet`, `getPodDeployment`,
    /// `getPodReplicationController`, `getPodStatefulSet`) over the informer caches.
    fn find_scale(&self, cref: &OwnerReference, ns: &str) -> Option<ControllerScale> {
        let group = cref.api_version.split_once('/').map_or("", |(g, _)| g);
        let key = key_of(Some(ns), &cref.name);
        let same = |uid: &Option<String>| uid.as_deref() == Some(cref.uid.as_str());
        match (group, cref.kind.as_str()) {
            ("apps", "ReplicaSet") => {
                let rs = self
                    .replicasets
                    .get(&key)
                    .filter(|rs| same(&rs.metadata.uid))?;
                match controller_of(&rs.metadata) {
                    Some(d) if d.kind == "Deployment" && d.api_version.starts_with("apps/") => {
                        let dep = self
                            .deployments
                            .get(&key_of(Some(ns), &d.name))
                            .filter(|dep| dep.metadata.uid.as_deref() == Some(d.uid.as_str()))?;
                        Some(ControllerScale {
                            uid: d.uid.clone(),
                            replicas: dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                        })
                    }
                    _ => Some(ControllerScale {
                        uid: cref.uid.clone(),
                        replicas: rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                    }),
                }
            }
            ("", "ReplicationController") => {
                let rc = self.rcs.get(&key).filter(|rc| same(&rc.metadata.uid))?;
                Some(ControllerScale {
                    uid: cref.uid.clone(),
                    replicas: rc.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                })
            }
            ("apps", "StatefulSet") => {
                let ss = self
                    .statefulsets
                    .get(&key)
                    .filter(|ss| same(&ss.metadata.uid))?;
                Some(ControllerScale {
                    uid: cref.uid.clone(),
                    replicas: ss.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
                })
            }
            _ => None,
        }
    }

    async fn write_status(&self, new: &PodDisruptionBudget) -> Result<()> {
        let ns = new.metadata.namespace.as_deref().unwrap_or_default();
        let name = new.metadata.name.as_deref().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
        match api.replace_status(name, &PostParams::default(), new).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn sync_budget(&self, key: &str) -> Result<Action> {
        let Some(pdb) = self.pdbs.get(key) else {
            return Ok(Action::Done);
        };
        let now = Timestamp::now();
        let ns = pdb.metadata.namespace.clone().unwrap_or_default();
        let all = self.pods.list_namespace(&ns);
        let refs: Vec<&Pod> = all.iter().map(|p| &**p).collect();
        let pods = selected_pods(&pdb, &refs);
        if pods.is_empty() {
            emit(
                &*self.events,
                &*pdb,
                EventType::Normal,
                "NoPods",
                "No matching pods found".into(),
            );
        }
        let find = |c: &OwnerReference, ns: &str| self.find_scale(c, ns);
        let expected = match expected_count(&pdb, &pods, &find) {
            Ok(e) => e,
            Err(err) => {
                emit(
                    &*self.events,
                    &*pdb,
                    EventType::Warning,
                    "CalculateExpectedPodCountFailed",
                    format!("Failed to calculate the number of expected pods: {err}"),
                );
                let failed = fail_safe(&pdb, err, now);
                if failed != *pdb {
                    self.write_status(&failed).await?;
                }
                return Ok(Action::Done);
            }
        };
        if !expected.unmanaged.is_empty() {
            emit(
                &*self.events,
                &*pdb,
                EventType::Warning,
                "UnmanagedPods",
                "Pods selected by this PodDisruptionBudget were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.".into(),
            );
        }
        let (disrupted, recheck, expired) = disrupted_pods(&pdb, &pods, now);
        for name in expired {
            if let Some(p) = self.pods.get(&key_of(Some(&ns), &name)) {
                emit(
                    &*self.events,
                    &*p,
                    EventType::Warning,
                    "NotDeleted",
                    format!(
                        "Pod was expected by PDB {ns}/{} to be deleted but it wasn't",
                        pdb.metadata.name.as_deref().unwrap_or_default()
                    ),
                );
            }
        }
        let healthy = count_healthy(&pods, &disrupted, now);
        if let Some(new) = updated_status(&pdb, healthy, &expected, disrupted, now) {
            self.write_status(&new).await?;
        }
        Ok(match recheck {
            Some(secs) => Action::RequeueAfter(Duration::from_secs(secs.max(0) as u64 + 1)),
            None => Action::Done,
        })
    }

    /// Upstream `syncStalePodDisruption`.
    async fn sync_pod(&self, key: &str) -> Result<Action> {
        let Some(pod) = self.pods.get(key) else {
            return Ok(Action::Done);
        };
        match stale_disruption_wait(&pod, Timestamp::now()) {
            None => Ok(Action::Done),
            Some(wait) if !wait.is_zero() => Ok(Action::RequeueAfter(wait)),
            Some(_) => {
                let (ns, name) = split_key(key);
                let api: Api<Pod> = Api::namespaced(self.client.clone(), ns.unwrap_or_default());
                let patch = json!({
                    "metadata": {"resourceVersion": pod.metadata.resource_version},
                    "status": {"conditions": [{"type": DISRUPTION_TARGET_CONDITION, "status": "False",
                        "lastTransitionTime": Timestamp::now().to_string()}]}
                });
                // A conflict (the pod changed) retries with the fresh cache.
                done_unless_failed(
                    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
                        .await,
                )
            }
        }
    }
}

/// The keys of the budgets selecting `pod` (upstream enqueues one arbitrarily; every
/// one is cheaper to reason about and as cheap to sync).
fn budgets_of(pdbs: &Store<PodDisruptionBudget>, pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    pdbs.list_namespace(ns)
        .iter()
        .filter(|b| !selected_pods(b, &[pod]).is_empty())
        .map(|b| object_key(&**b))
        .collect()
}

#[async_trait::async_trait]
impl Controller for DisruptionController {
    fn name(&self) -> &'static str {
        "disruption"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory.informer::<PodDisruptionBudget>().add_event_handler(
            move |n: Notification<PodDisruptionBudget>| q.add(object_key(&**n.object())),
            None,
        );
        let q = queue.clone();
        let pdbs = self.pdbs.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| {
                let pod = n.object();
                for key in budgets_of(&pdbs, pod) {
                    q.add(key);
                }
                if !matches!(n, Notification::Deleted { .. })
                    && stale_disruption_wait(pod, Timestamp::now()).is_some()
                {
                    q.add(format!("{POD_KEY_PREFIX}{}", object_key(&**pod)));
                }
            },
            None,
        );
        // Listed for their scale only; a scale change shows up as pod changes.
        let _ = (
            factory.informer::<ReplicaSet>(),
            factory.informer::<Deployment>(),
            factory.informer::<ReplicationController>(),
            factory.informer::<StatefulSet>(),
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        match key.strip_prefix(POD_KEY_PREFIX) {
            Some(pod) => self.sync_pod(pod).await,
            None => self.sync_budget(key).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pod(
        name: &str,
        labels: serde_json::Value,
        owner: Option<(&str, &str, &str)>,
        ready: bool,
    ) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        });
        if let Some((api, kind, uid)) = owner {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": api, "kind": kind, "name": "o", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(v).unwrap()
    }

    fn budget(spec: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(
            json!({"metadata": {"name": "b", "namespace": "ns", "generation": 1}, "spec": spec}),
        )
        .unwrap()
    }

    fn scale_of(replicas: i32) -> impl Fn(&OwnerReference, &str) -> Option<ControllerScale> {
        move |c: &OwnerReference, _ns: &str| {
            (c.kind == "ReplicaSet").then(|| ControllerScale {
                uid: c.uid.clone(),
                replicas,
            })
        }
    }

    #[test]
    fn selection_follows_policy_v1() {
        let a = pod("a", json!({"app": "x"}), None, true);
        let b = pod("b", json!({"app": "y"}), None, true);
        let pods = [&a, &b];
        let sel = budget(json!({"selector": {"matchLabels": {"app": "x"}}}));
        assert_eq!(selected_pods(&sel, &pods).len(), 1);
        // An empty selector selects every pod of the namespace; a missing one none.
        assert_eq!(
            selected_pods(&budget(json!({"selector": {}})), &pods).len(),
            2
        );
        assert_eq!(selected_pods(&budget(json!({})), &pods).len(), 0);
    }

    #[test]
    fn expected_counts_for_ints_and_percentages() {
        let owned = |n: &str| {
            pod(
                n,
                json!({"app": "x"}),
                Some(("apps/v1", "ReplicaSet", "rs1")),
                true,
            )
        };
        let (a, b, c) = (owned("a"), owned("b"), owned("c"));
        let pods = [&a, &b, &c];
        let find = scale_of(4);
        // minAvailable int: the selected pods are expected.
        let e = expected_count(&budget(json!({"minAvailable": 2})), &pods, &find).unwrap();
        assert_eq!((e.expected_pods, e.desired_healthy), (3, 2));
        // minAvailable percent: the controller's scale, rounded up.
        let e = expected_count(&budget(json!({"minAvailable": "50%"})), &pods, &find).unwrap();
        assert_eq!((e.expected_pods, e.desired_healthy), (4, 2));
        // maxUnavailable int and percent (rounded up, so fewer desired).
        let e = expected_count(&budget(json!({"maxUnavailable": 1})), &pods, &find).unwrap();
        assert_eq!((e.expected_pods, e.desired_healthy), (4, 3));
        let e = expected_count(&budget(json!({"maxUnavailable": "30%"})), &pods, &find).unwrap();
        assert_eq!((e.expected_pods, e.desired_healthy), (4, 2));
        let e = expected_count(&budget(json!({"maxUnavailable": 9})), &pods, &find).unwrap();
        assert_eq!(e.desired_healthy, 0);

        // Unmanaged pods do not count towards a scale; unknown controllers fail.
        let lone = pod("lone", json!({"app": "x"}), None, true);
        let e = expected_count(&budget(json!({"maxUnavailable": 1})), &[&a, &lone], &find).unwrap();
        assert_eq!(e.unmanaged, vec!["lone".to_string()]);
        assert_eq!(e.expected_pods, 4);
        let job = pod(
            "j",
            json!({"app": "x"}),
            Some(("batch/v1", "Job", "j1")),
            true,
        );
        let err =
            expected_count(&budget(json!({"maxUnavailable": 1})), &[&job], &find).unwrap_err();
        assert_eq!(err, "found no controllers for pod \"j\"");
    }

    #[test]
    fn status_counts_ready_pods_and_holds_out_recent_evictions() {
        let now = ts("2024-01-01T00:10:00Z");
        let (a, b, c) = (
            pod("a", json!({}), None, true),
            pod("b", json!({}), None, true),
            pod("c", json!({}), None, false),
        );
        let pods = [&a, &b, &c];
        let mut pdb = budget(json!({"minAvailable": 1, "selector": {}}));
        pdb.status = Some(PodDisruptionBudgetStatus {
            disrupted_pods: Some(BTreeMap::from([
                ("a".to_string(), Time(ts("2024-01-01T00:09:30Z"))),
                ("b".to_string(), Time(ts("2024-01-01T00:05:00Z"))),
            ])),
            ..Default::default()
        });
        let (disrupted, recheck, expired) = disrupted_pods(&pdb, &pods, now);
        assert_eq!(disrupted.keys().collect::<Vec<_>>(), vec!["a"]);
        assert_eq!(recheck, Some(90));
        assert_eq!(expired, vec!["b".to_string()]);
        let healthy = count_healthy(&pods, &disrupted, now);
        assert_eq!(healthy, 1);
        let exp = expected_count(&pdb, &pods, &scale_of(3)).unwrap();
        let new = updated_status(&pdb, healthy, &exp, disrupted.clone(), now).unwrap();
        let st = new.status.clone().unwrap();
        assert_eq!(
            (
                st.current_healthy,
                st.desired_healthy,
                st.expected_pods,
                st.disruptions_allowed
            ),
            (1, 1, 3, 0)
        );
        assert_eq!(st.observed_generation, Some(1));
        let cond = &st.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_str()),
            ("False", "InsufficientPods")
        );
        // Idempotent: the written status needs no second write.
        assert_eq!(updated_status(&new, healthy, &exp, disrupted, now), None);

        // Two healthy of one desired: one disruption allowed.
        let new = updated_status(&pdb, 2, &exp, BTreeMap::new(), now).unwrap();
        let st = new.status.unwrap();
        assert_eq!(st.disruptions_allowed, 1);
        assert_eq!(st.conditions.unwrap()[0].reason, "SufficientPods");
        // No pods expected: nothing allowed whatever the counts.
        let none = Expected {
            expected_pods: 0,
            desired_healthy: 0,
            unmanaged: vec![],
        };
        let st = updated_status(&pdb, 2, &none, BTreeMap::new(), now)
            .unwrap()
            .status
            .unwrap();
        assert_eq!(st.disruptions_allowed, 0);
    }

    #[test]
    fn stale_disruption_condition() {
        let now = ts("2024-01-01T00:10:00Z");
        let mut p = pod("a", json!({}), None, true);
        assert_eq!(stale_disruption_wait(&p, now), None);
        p.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(
                serde_json::from_value(json!({
            "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
            "lastTransitionTime": "2024-01-01T00:09:00Z"}))
                .unwrap(),
            );
        assert_eq!(
            stale_disruption_wait(&p, now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            stale_disruption_wait(&p, ts("2024-01-01T00:20:00Z")),
            Some(Duration::ZERO)
        );
        p.metadata.deletion_timestamp = Some(Time(now));
        assert_eq!(stale_disruption_wait(&p, now), None);
    }
}
