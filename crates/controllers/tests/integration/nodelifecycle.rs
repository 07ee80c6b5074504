//! A node that stops heartbeating has its pods evicted and recreated on another node:
//! the test apiserver, the real scheduler, the node lifecycle, ReplicaSet and
//! Deployment controllers (grace period of seconds), and two fake kubelets from
//! `support`. Every wait is bounded in time.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_controllers::nodelifecycle::{NodeLifecycleConfig, TAINT_UNREACHABLE};
use ferrokube_scheduler::KubeSchedulerConfiguration;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::{FakeNode, wait_for};
use tokio_util::sync::CancellationToken;

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// (source component, reason, message) of the core events about the object `name`.
async fn events_about(c: &Client, name: &str) -> anyhow::Result<Vec<(String, String, String)>> {
    Ok(ferrokube_testing::core_events_about(c, name)
        .await?
        .into_iter()
        .map(|e| {
            (
                e.source.and_then(|s| s.component).unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect())
}

fn has_event(
    events: &[(String, String, String)],
    component: &str,
    reason: &str,
    message: &str,
) -> bool {
    events
        .iter()
        .any(|(c, r, m)| c == component && r == reason && m == message)
}

async fn web_pods(c: &Client) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    Ok(pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_node_has_its_pods_evicted_and_recreated_elsewhere() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let a = FakeNode::start(&c, "node-a", false, cancel.clone()).await?;
    let b = FakeNode::start(&c, "node-b", false, cancel.clone()).await?;
    let cfg = ManagerConfig {
        controllers: vec![
            "replicaset".into(),
            "deployment".into(),
            "nodelifecycle".into(),
            "taint-eviction-controller".into(),
        ],
        node_lifecycle: NodeLifecycleConfig {
            grace_period: Duration::from_secs(2),
            monitor_period: Duration::from_millis(500),
            startup_grace_period: Duration::from_secs(2),
            ..Default::default()
        },
        ..Default::default()
    };
    let manager = Manager::start(c.clone(), &cfg, cancel.clone()).await?;
    // Both nodes healthy (no taints) before anything is scheduled.
    let nodes: Api<Node> = Api::all(c.clone());
    wait_for(30, "two untainted nodes", || async {
        let list = nodes.list(&ListParams::default()).await?.items;
        let clean = list.len() == 2
            && list.iter().all(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_none_or(|t| t.is_empty())
            });
        Ok(clean.then_some(()))
    })
    .await?;
    let scheduler =
        ferrokube_scheduler::run::build(c.clone(), &KubeSchedulerConfiguration::default_config())?;
    let sched_task = tokio::spawn(scheduler.run(cancel.clone()));

    // Short tolerations of the node-problem taints (admission would add 300 s).
    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    deps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "img"}],
                                           "tolerations": [
                                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 1},
                                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 1}]}}}
        }))?,
    )
    .await?;
    let pods = wait_for(60, "4 ready pods", || async {
        let pods = web_pods(&c).await?;
        Ok((pods.iter().filter(|p| ready(p)).count() == 4).then_some(pods))
    })
    .await?;

    // The node with the most pods goes silent.
    let on_a: Vec<String> = pods
        .iter()
        .filter(|p| node_of(p).as_deref() == Some("node-a"))
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let (victim, survivor, doomed) = if on_a.len() >= 2 {
        (&a, "node-b", on_a)
    } else {
        let on_b = pods
            .iter()
            .filter(|p| node_of(p).as_deref() == Some("node-b"))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        (&b, "node-a", on_b)
    };
    assert!(!doomed.is_empty());
    victim.stop_heartbeats();

    // Ready=Unknown and the unreachable NoExecute taint on the silent node.
    wait_for(60, "silent node tainted unreachable", || async {
        let n = nodes.get(&victim.name).await?;
        let unknown = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Ready" && c.status == "Unknown")
            });
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| {
                ts.iter()
                    .any(|t| t.key == TAINT_UNREACHABLE && t.effect == "NoExecute")
            });
        Ok((unknown && tainted).then_some(()))
    })
    .await?;

    // The node controller's events: each node registered, the silent one not ready, and
    // its pods marked not ready and evicted.
    for node in ["node-a", "node-b"] {
        let message = format!("Node {node} event: Registered Node {node} in Controller");
        wait_for(20, "RegisteredNode events", || async {
            let got = events_about(&c, node).await?;
            Ok(has_event(&got, "node-controller", "RegisteredNode", &message).then_some(()))
        })
        .await?;
    }
    let not_ready = format!("Node {} status is now: NodeNotReady", victim.name);
    wait_for(20, "NodeNotReady event about the node", || async {
        let got = events_about(&c, &victim.name).await?;
        Ok(has_event(&got, "node-controller", "NodeNotReady", &not_ready).then_some(()))
    })
    .await?;
    for pod in &doomed {
        let evicted = format!("Marking for deletion Pod default/{pod}");
        wait_for(
            60,
            "NodeNotReady and TaintManagerEviction events about its pods",
            || async {
                let got = events_about(&c, pod).await?;
                Ok(
                    (has_event(&got, "node-controller", "NodeNotReady", "Node is not ready")
                        && has_event(
                            &got,
                            "taint-eviction-controller",
                            "TaintManagerEviction",
                            &evicted,
                        ))
                    .then_some(()),
                )
            },
        )
        .await?;
    }

    // Its pods are evicted (they stay terminating: no kubelet finishes them) and the
    // Deployment is whole again on the other node.
    wait_for(60, "pods evicted and recreated on the survivor", || async {
        let pods = web_pods(&c).await?;
        let evicted = doomed.iter().all(|name| {
            pods.iter()
                .find(|p| p.metadata.name.as_ref() == Some(name))
                .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
        });
        let live: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        let whole = live.len() == 4
            && live
                .iter()
                .all(|p| ready(p) && node_of(p).as_deref() == Some(survivor));
        Ok((evicted && whole).then_some(()))
    })
    .await?;

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    let _ = tokio::time::timeout(Duration::from_secs(10), sched_task).await;
    srv.stop().await;
    Ok(())
}
