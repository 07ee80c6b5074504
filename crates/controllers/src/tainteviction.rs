//! Taint-based eviction (upstream `pkg/controller/tainteviction`, the
//! `taint-eviction-controller`, separate from node lifecycle since 1.29 so that
//! `--controllers=-taint-eviction-controller` leaves NoExecute taints to someone
//! else): the pods bound to a node with NoExecute taints are deleted once their
//! tolerations run out (at once when they do not tolerate a taint), with the
//! `DisruptionTarget` condition (reason `DeletionByTaintManager`) set first and a
//! `TaintManagerEviction` event, as upstream. It writes as upstream's does, with the
//! `node-controller` ServiceAccount.
//!
//! Each node is one key: a change of its taints, or a pod bound to it or changing
//! its tolerations, looks at the node's pods again, and the earliest eviction still
//! to come is the next look. A taint removed before that cancels it: nothing is
//! scheduled but the look. Pure part: [`tolerates`], [`toleration_limit`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::json;

use ferrokube_client::informer::{Notification, SharedInformerFactory, Store, object_key};
use ferrokube_client::workqueue::WorkQueue;

use crate::events::{EventSink, EventType, emit};
use crate::replicaset::is_not_found;
use crate::util::pod_node;
use crate::{Action, Controller, Result};

/// Upstream `v1helper.ToleratesTaint`.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = t.effect.as_deref()
        && !e.is_empty()
        && e != taint.effect
    {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        _ => {
            !key.is_empty()
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

/// How long a pod on a node with these (NoExecute) taints may stay: `None` for ever,
/// `Some(0)` not at all. Upstream `processPodOnNode`: a taint no toleration tolerates
/// evicts at once; otherwise the first toleration of each taint is used
/// (`GetMatchingTolerations`) and the smallest `tolerationSeconds` among them applies
/// (`getMinTolerationTime`: one of 0 or less is 0; none set is for ever, as is
/// 9223372036854775807, the value upstream starts its search from).
pub fn toleration_limit(pod: &Pod, taints: &[Taint]) -> Option<u64> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let mut limit: Option<i64> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let Some(used) = tolerations.iter().find(|t| tolerates(t, taint)) else {
            return Some(0);
        };
        if let Some(s) = used.toleration_seconds {
            if s <= 0 {
                return Some(0);
            }
            limit = Some(limit.map_or(s, |l| l.min(s)));
        }
    }
    limit.filter(|&l| l != i64::MAX).map(|l| l as u64)
}

fn no_execute_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| t.effect == "NoExecute")
        .cloned()
        .collect()
}

fn tolerations(pod: &Pod) -> Option<&Vec<Toleration>> {
    pod.spec.as_ref()?.tolerations.as_ref()
}

/// The taint eviction controller.
pub struct TaintEvictionController {
    client: kube::Client,
    nodes: Store<Node>,
    pods: Store<Pod>,
    events: Arc<dyn EventSink>,
    /// By node, by pod key: when the pod's timed eviction was first scheduled (epoch
    /// seconds). As upstream's eviction queue, the tolerations count from the moment
    /// the controller saw the taint on the pod's node, not from the taint's
    /// `timeAdded` (`kubectl taint` sets none).
    scheduled: Mutex<HashMap<String, HashMap<String, i64>>>,
}

impl TaintEvictionController {
    /// `events`: the recorder of component `taint-eviction-controller`.
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        events: Arc<dyn EventSink>,
    ) -> Arc<Self> {
        Arc::new(TaintEvictionController {
            client,
            nodes: factory.informer::<Node>().store(),
            pods: factory.informer::<Pod>().store(),
            events,
            scheduled: Mutex::new(HashMap::new()),
        })
    }

    async fn evict(&self, pod: &Pod) -> Result<()> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        emit(
            &*self.events,
            pod,
            EventType::Normal,
            "TaintManagerEviction",
            format!("Marking for deletion Pod {ns}/{name}"),
        );
        let patch = json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
            "reason": "DeletionByTaintManager", "message": "Taint manager: deleting due to NoExecute taint"}]}});
        // As upstream, the condition is best effort: the deletion matters.
        let _ = pods
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await;
        match pods.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait::async_trait]
impl Controller for TaintEvictionController {
    fn name(&self) -> &'static str {
        "taint-eviction-controller"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let q = queue.clone();
        factory.informer::<Node>().add_event_handler(
            move |n: Notification<Node>| {
                let changed = match &n {
                    Notification::Added { obj, .. } => !no_execute_taints(obj).is_empty(),
                    Notification::Updated { old, new } => {
                        no_execute_taints(old) != no_execute_taints(new)
                    }
                    Notification::Deleted { .. } => false,
                };
                if changed && let Some(name) = n.object().metadata.name.clone() {
                    q.add(name);
                }
            },
            None,
        );
        let q = queue.clone();
        factory.informer::<Pod>().add_event_handler(
            move |n: Notification<Pod>| {
                let looked_at = match &n {
                    Notification::Added { obj, .. } => pod_node(obj).is_some(),
                    Notification::Updated { old, new } => {
                        pod_node(old) != pod_node(new) || tolerations(old) != tolerations(new)
                    }
                    Notification::Deleted { .. } => false,
                };
                if looked_at && let Some(node) = pod_node(n.object()) {
                    q.add(node.to_string());
                }
            },
            None,
        );
    }

    async fn reconcile(&self, key: &str) -> Result<Action> {
        let taints = self
            .nodes
            .get(key)
            .map(|n| no_execute_taints(&n))
            .unwrap_or_default();
        if taints.is_empty() {
            // Gone or untainted: every eviction scheduled there is cancelled.
            self.scheduled.lock().remove(key);
            return Ok(Action::Done);
        }
        let now = Timestamp::now().as_second();
        let mut evict = Vec::new();
        let mut next: Option<u64> = None;
        {
            let mut scheduled = self.scheduled.lock();
            let before = scheduled.remove(key).unwrap_or_default();
            let mut kept = HashMap::new();
            for pod in self.pods.list() {
                if pod_node(&pod) != Some(key) || pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let Some(limit) = toleration_limit(&pod, &taints) else {
                    continue;
                };
                let pod_key = object_key(&*pod);
                let since = before.get(&pod_key).copied().unwrap_or(now);
                let due = since.saturating_add(i64::try_from(limit).unwrap_or(i64::MAX));
                if due <= now {
                    evict.push(pod);
                } else {
                    kept.insert(pod_key, since);
                    let wait = (due - now) as u64;
                    next = Some(next.map_or(wait, |n| n.min(wait)));
                }
            }
            if !kept.is_empty() {
                scheduled.insert(key.to_string(), kept);
            }
        }
        let mut failed = None;
        for pod in &evict {
            // One pod failing does not hold the others back; the key is retried.
            if let Err(e) = self.evict(pod).await {
                failed.get_or_insert(e);
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(next.map_or(Action::Done, |secs| {
            Action::RequeueAfter(Duration::from_secs(secs))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const TAINT_UNREACHABLE: &str = crate::nodelifecycle::TAINT_UNREACHABLE;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn how_long_tolerations_allow() {
        let unreachable = Taint {
            key: TAINT_UNREACHABLE.into(),
            effect: "NoExecute".into(),
            value: None,
            time_added: Some(Time(ts(100))),
        };
        let taints = std::slice::from_ref(&unreachable);
        let pod = |tols: serde_json::Value| -> Pod {
            serde_json::from_value(json!({"spec": {"containers": [], "tolerations": tols}}))
                .unwrap()
        };
        assert_eq!(toleration_limit(&pod(json!([])), taints), Some(0));
        let t = json!([{"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]);
        assert_eq!(toleration_limit(&pod(t), taints), Some(300));
        assert_eq!(
            toleration_limit(&pod(json!([{"operator": "Exists"}])), taints),
            None
        );
        // The first toleration of a taint is the one used, as upstream's
        // GetMatchingTolerations.
        let two = json!([
            {"key": TAINT_UNREACHABLE, "operator": "Exists", "tolerationSeconds": 30},
            {"key": TAINT_UNREACHABLE, "operator": "Exists", "tolerationSeconds": 5}]);
        assert_eq!(toleration_limit(&pod(two), taints), Some(30));
        // Across taints the smallest applies; zero or less is at once.
        let other = Taint {
            key: "dedicated".into(),
            ..unreachable.clone()
        };
        let both = [unreachable.clone(), other];
        let tols = |a: i64, b: i64| {
            json!([
                {"key": TAINT_UNREACHABLE, "operator": "Exists", "tolerationSeconds": a},
                {"key": "dedicated", "operator": "Exists", "tolerationSeconds": b}])
        };
        assert_eq!(toleration_limit(&pod(tols(30, 10)), &both), Some(10));
        assert_eq!(toleration_limit(&pod(tols(30, -5)), &both), Some(0));
        // One taint untolerated: at once, whatever the other allows.
        assert_eq!(
            toleration_limit(
                &pod(json!([{"key": TAINT_UNREACHABLE, "operator": "Exists"}])),
                &both
            ),
            Some(0)
        );
        // The largest tolerationSeconds is upstream's "for ever"; the next one is not.
        let largest = |s: i64| json!([{"key": TAINT_UNREACHABLE, "operator": "Exists", "tolerationSeconds": s}]);
        assert_eq!(toleration_limit(&pod(largest(i64::MAX)), taints), None);
        assert_eq!(
            toleration_limit(&pod(largest(i64::MAX - 1)), taints),
            Some((i64::MAX - 1) as u64)
        );
        let no_schedule_only = Taint {
            effect: "NoSchedule".into(),
            ..unreachable
        };
        assert_eq!(toleration_limit(&pod(json!([])), &[no_schedule_only]), None);
    }
}
