//! PodDisruptionBudgets end to end on the test apiserver: the disruption controller
//! computes the budget's status and the `pods/eviction` subresource honours it
//! (evictions succeed until the budget is spent, then 429; several budgets 500).
//! Every wait is bounded in time.

use crate::support;

use std::sync::atomic::Ordering;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use support::{FakeNode, wait_for};
use tokio_util::sync::CancellationToken;

/// POSTs an Eviction of `default/pod`: (HTTP code, response body).
async fn evict(c: &Client, pod: &str) -> anyhow::Result<(u16, Value)> {
    let body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": "default"}});
    let (code, _, bytes) = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        TestApiServer::raw(
            c,
            "POST",
            &format!("/api/v1/namespaces/default/pods/{pod}/eviction"),
            &[("content-type", "application/json")],
            serde_json::to_vec(&body)?,
        ),
    )
    .await??;
    Ok((code, serde_json::from_slice(&bytes)?))
}

async fn ready_pods(c: &Client) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    Ok(pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .collect())
}

/// Waits for the budget's status to reach (currentHealthy, desiredHealthy,
/// expectedPods, disruptionsAllowed) at its current generation.
async fn wait_budget(
    c: &Client,
    name: &str,
    want: (i32, i32, i32, i32),
) -> anyhow::Result<PodDisruptionBudget> {
    let api: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    wait_for(30, &format!("budget {name} at {want:?}"), || async {
        let b = api.get(name).await?;
        let st = b.status.clone().unwrap_or_default();
        let got = (
            st.current_healthy,
            st.desired_healthy,
            st.expected_pods,
            st.disruptions_allowed,
        );
        Ok((got == want && st.observed_generation == b.metadata.generation).then_some(b))
    })
    .await
}

fn condition(b: &PodDisruptionBudget) -> (String, String) {
    b.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionAllowed"))
        .map(|c| (c.status.clone(), c.reason.clone()))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn evictions_spend_the_budget_then_429_and_several_budgets_500() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    // kube-rs retries 429s by default (15 times, backing off to minutes); the
    // evictions here must see them.
    let mut no_retry = srv.kube_config().await?;
    no_retry.default_retry = false;
    let evictor = Client::try_from(no_retry)?;
    let cancel = CancellationToken::new();
    let node = FakeNode::start(&c, "node-a", true, cancel.clone()).await?;
    let cfg = ManagerConfig {
        controllers: vec![
            "replicaset".into(),
            "deployment".into(),
            "disruption".into(),
        ],
        ..Default::default()
    };
    let manager = Manager::start(c.clone(), &cfg, cancel.clone()).await?;

    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    deps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "img"}]}}}
        }))?,
    )
    .await?;
    wait_for(30, "4 ready pods", || async {
        Ok((ready_pods(&c).await?.len() == 4).then_some(()))
    })
    .await?;

    // A percentage counts against the Deployment's scale: 50% of 4 -> 2 desired.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}
        }))?,
    )
    .await?;
    let b = wait_budget(&c, "web", (4, 2, 4, 2)).await?;
    assert_eq!(condition(&b), ("True".into(), "SufficientPods".into()));

    // Replacements stay unready, so each eviction spends the budget for good.
    node.hold_new_unready.store(true, Ordering::SeqCst);
    let victims: Vec<String> = ready_pods(&c)
        .await?
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();

    // The first eviction is checked while the kubelet is away, so the pod is still
    // there and marked.
    node.alive.store(false, Ordering::SeqCst);
    let (code, body) = evict(&evictor, &victims[0]).await?;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"], "Success");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let marked = pods.get(&victims[0]).await?;
    assert!(marked.metadata.deletion_timestamp.is_some());
    let cond = marked
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
        .cloned()
        .expect("DisruptionTarget condition");
    assert_eq!(cond.status, "True");
    assert_eq!(cond.reason.as_deref(), Some("EvictionByEvictionAPI"));
    assert_eq!(cond.message.as_deref(), Some("Eviction API: evicting"));
    // One disruption spent (by the eviction; the controller, seeing the pod
    // deleting, agrees).
    assert_eq!(
        pdbs.get("web")
            .await?
            .status
            .unwrap_or_default()
            .disruptions_allowed,
        1
    );
    node.alive.store(true, Ordering::SeqCst);

    let (code, body) = evict(&evictor, &victims[1]).await?;
    assert_eq!(code, 201, "{body}");
    // 2 healthy of 2 desired: nothing left to spend.
    let b = wait_budget(&c, "web", (2, 2, 4, 0)).await?;
    assert_eq!(condition(&b), ("False".into(), "InsufficientPods".into()));
    let (code, body) = evict(&evictor, &victims[2]).await?;
    assert_eq!(code, 429, "{body}");
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(
        body["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(body["details"]["causes"][0]["reason"], "DisruptionBudget");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    );
    assert!(
        pods.get(&victims[2])
            .await?
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // Once the replacements are ready the budget allows evictions again.
    node.hold_new_unready.store(false, Ordering::SeqCst);
    wait_budget(&c, "web", (4, 2, 4, 2)).await?;
    let (code, body) = evict(&evictor, &victims[2]).await?;
    assert_eq!(code, 201, "{body}");

    // A second budget over the same pods: the eviction subresource refuses with 500.
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "web-too"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}
        }))?,
    )
    .await?;
    let (code, body) = evict(&evictor, &victims[3]).await?;
    assert_eq!(code, 500, "{body}");
    assert_eq!(
        body["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    pdbs.delete("web-too", &DeleteParams::default()).await?;

    // A pod no budget selects is evicted at once.
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "lone", "labels": {"app": "lone"}},
            "spec": {"containers": [{"name": "c", "image": "img"}]}
        }))?,
    )
    .await?;
    let (code, body) = evict(&evictor, "lone").await?;
    assert_eq!(code, 201, "{body}");
    let (code, body) = evict(&evictor, "nonexistent").await?;
    assert_eq!(code, 404, "{body}");

    cancel.cancel();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
