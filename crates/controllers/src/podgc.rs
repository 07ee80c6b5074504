//! The pod garbage collector (upstream `pkg/controller/podgc`), run every 20 s on a
//! single work item: terminated pods over `--terminated-pod-gc-threshold` (oldest
//! first), orphaned pods bound to nodes that no longer exist, and unscheduled pods
//! that are terminating.
//!
//! Pure part: [`plan`]. IO part: [`PodGcController`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use ferrokube_client::informer::{SharedInformerFactory, Store};
use ferrokube_client::workqueue::WorkQueue;

use crate::replicaset::is_not_found;
use crate::util::{created_secs, is_pod_terminal, pod_node};
use crate::{Action, Controller, Result};

/// Upstream `gcCheckPeriod`.
pub const GC_CHECK_PERIOD: Duration = Duration::from_secs(20);
/// Upstream default `--terminated-pod-gc-threshold`.
pub const DEFAULT_THRESHOLD: usize = 12500;
/// The single work item.
pub const KEY: &str = "podgc";

/// Why a pod is collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Terminated,
    Orphaned,
    UnscheduledTerminating,
}

/// The pods to delete, as (namespace, name, reason). `threshold` 0 disables the
/// terminated-pod pass (as upstream).
pub fn plan(
    pods: &[&Pod],
    nodes: &HashSet<String>,
    threshold: usize,
) -> Vec<(String, String, Reason)> {
    let id = |p: &Pod| {
        (
            p.metadata.namespace.clone().unwrap_or_default(),
            p.metadata.name.clone().unwrap_or_default(),
        )
    };
    let mut out = Vec::new();
    let mut done: HashSet<(String, String)> = HashSet::new();
    if threshold > 0 {
        let mut terminated: Vec<&&Pod> = pods.iter().filter(|p| is_pod_terminal(p)).collect();
        if terminated.len() > threshold {
            // Evicted first, then oldest first.
            terminated.sort_by_key(|p| {
                let evicted =
                    p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted");
                (!evicted, created_secs(&p.metadata))
            });
            for p in terminated.iter().take(terminated.len() - threshold) {
                let (ns, n) = id(p);
                done.insert((ns.clone(), n.clone()));
                out.push((ns, n, Reason::Terminated));
            }
        }
    }
    for p in pods {
        let key = id(p);
        if done.contains(&key) {
            continue;
        }
        match pod_node(p) {
            Some(n) if !nodes.contains(n) => out.push((key.0, key.1, Reason::Orphaned)),
            None if p.metadata.deletion_timestamp.is_some() => {
                out.push((key.0, key.1, Reason::UnscheduledTerminating))
            }
            _ => {}
        }
    }
    out
}

/// The pod garbage collector.
pub struct PodGcController {
    client: kube::Client,
    pods: Store<Pod>,
    nodes: Store<Node>,
    threshold: usize,
}

impl PodGcController {
    pub fn new(
        factory: &SharedInformerFactory,
        client: kube::Client,
        threshold: usize,
    ) -> Arc<Self> {
        Arc::new(PodGcController {
            client,
            pods: factory.informer::<Pod>().store(),
            nodes: factory.informer::<Node>().store(),
            threshold,
        })
    }
}

#[async_trait::async_trait]
impl Controller for PodGcController {
    fn name(&self) -> &'static str {
        "pod-garbage-collector"
    }

    fn watch(self: Arc<Self>, factory: &SharedInformerFactory, queue: &WorkQueue<String>) {
        let _ = (factory.informer::<Pod>(), factory.informer::<Node>());
        queue.add_after(KEY.to_string(), GC_CHECK_PERIOD);
    }

    async fn reconcile(&self, _key: &str) -> Result<Action> {
        let pods = self.pods.list();
        let pods: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
        let nodes: HashSet<String> = self.nodes.list_keys().into_iter().collect();
        let todo = plan(&pods, &nodes, self.threshold);
        let mut first_err = None;
        for (ns, name, reason) in todo {
            // Orphans on deleted nodes: confirm the node is gone (upstream checks the API).
            if reason == Reason::Orphaned
                && let Some(p) = self.pods.get(&format!("{ns}/{name}"))
                && let Some(n) = pod_node(&p)
                && Api::<Node>::all(self.client.clone())
                    .get_opt(n)
                    .await?
                    .is_some()
            {
                continue;
            }
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            if reason != Reason::Terminated {
                // Upstream marks such pods Failed with a DisruptionTarget condition first.
                let patch = json!({"status": {"phase": "Failed", "conditions": [{
                    "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                    "message": "PodGC: node no longer exists"}]}});
                let _ = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
                    .await;
            }
            if let Err(e) = api
                .delete(
                    &name,
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    },
                )
                .await
                && !is_not_found(&e)
            {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(Action::RequeueAfter(GC_CHECK_PERIOD)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, node: Option<&str>, phase: &str, created: i64, deleting: bool) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": format!("2024-01-01T00:00:{:02}Z", created)},
            "spec": {"containers": []},
            "status": {"phase": phase},
        });
        if let Some(n) = node {
            v["spec"]["nodeName"] = json!(n);
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:01:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn plans() {
        let nodes: HashSet<String> = ["n1".to_string()].into();
        let pods = [
            pod("old-done", Some("n1"), "Succeeded", 1, false),
            pod("new-done", Some("n1"), "Failed", 5, false),
            pod("mid-done", Some("n1"), "Succeeded", 3, false),
            pod("running", Some("n1"), "Running", 0, false),
            pod("orphan", Some("gone"), "Running", 0, false),
            pod("unscheduled-deleting", None, "Pending", 0, true),
            pod("unscheduled", None, "Pending", 0, false),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let got: Vec<(String, Reason)> = plan(&refs, &nodes, 1)
            .into_iter()
            .map(|(_, n, r)| (n, r))
            .collect();
        assert_eq!(
            got,
            vec![
                ("old-done".into(), Reason::Terminated),
                ("mid-done".into(), Reason::Terminated),
                ("orphan".into(), Reason::Orphaned),
                (
                    "unscheduled-deleting".into(),
                    Reason::UnscheduledTerminating
                ),
            ]
        );
        // Under the threshold (or disabled) terminated pods stay.
        assert_eq!(plan(&refs, &nodes, 3).len(), 2);
        assert_eq!(plan(&refs, &nodes, 0).len(), 2);
    }
}
