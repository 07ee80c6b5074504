//! A restart of the controller-manager in the middle of a rollout finishes the
//! rollout with no extra pods: the Deployment never has more pods than
//! replicas + maxSurge, and ends with exactly its replicas, all on the new template.
//! Every wait is bounded in time.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{FakeNode, wait_for};
use tokio_util::sync::CancellationToken;

fn image(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers[0].image.clone())
        .unwrap_or_default()
}

fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn live_pods(c: &Client) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    Ok(pods
        .list(&ListParams::default().labels("app=web"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

async fn start_manager(c: &Client, cancel: CancellationToken) -> anyhow::Result<Manager> {
    let cfg = ManagerConfig {
        controllers: vec!["replicaset".into(), "deployment".into()],
        ..Default::default()
    };
    Ok(Manager::start(c.clone(), &cfg, cancel).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_mid_rollout_finishes_with_no_extra_pods() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let stop = CancellationToken::new();
    let node = FakeNode::start(&c, "node-a", true, stop.clone()).await?;
    let first = CancellationToken::new();
    let manager = start_manager(&c, first.clone()).await?;

    let deps: Api<Deployment> = Api::namespaced(c.clone(), "default");
    deps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"type": "RollingUpdate",
                                  "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "img:v1"}]}}}
        }))?,
    )
    .await?;
    wait_for(60, "10 ready v1 pods", || async {
        let pods = live_pods(&c).await?;
        Ok((pods.len() == 10 && pods.iter().all(ready)).then_some(()))
    })
    .await?;

    // The most pods ever seen at once, sampled through the whole rollout.
    let peak = Arc::new(AtomicUsize::new(0));
    let sampling = CancellationToken::new();
    let sampler = {
        let (c, peak, sampling) = (c.clone(), peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while !sampling.is_cancelled() {
                if let Ok(pods) = live_pods(&c).await {
                    peak.fetch_max(pods.len(), Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    // New pods stay unready, so the rollout stops after its first surge.
    node.hold_new_unready.store(true, Ordering::SeqCst);
    deps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "img:v2"}]}}}})),
    )
    .await?;
    wait_for(30, "the first surge of v2 pods", || async {
        let pods = live_pods(&c).await?;
        Ok((pods.iter().filter(|p| image(p) == "img:v2").count() == 3).then_some(()))
    })
    .await?;

    // Restart mid-rollout: the old manager stops, a new one rebuilds from the API.
    first.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    let second = CancellationToken::new();
    let manager = start_manager(&c, second.clone()).await?;
    node.hold_new_unready.store(false, Ordering::SeqCst);

    wait_for(90, "rollout complete at 10 x v2", || async {
        let d = deps.get("web").await?;
        let st = d.status.clone().unwrap_or_default();
        let pods = live_pods(&c).await?;
        let done = st.observed_generation == d.metadata.generation
            && st.updated_replicas == Some(10)
            && st.available_replicas == Some(10)
            && st.replicas == Some(10)
            && pods.len() == 10
            && pods.iter().all(|p| ready(p) && image(p) == "img:v2");
        Ok(done.then_some(()))
    })
    .await?;
    sampling.cancel();
    let _ = sampler.await;
    let most = peak.load(Ordering::SeqCst);
    assert!(
        most <= 13,
        "{most} pods at once: more than replicas + maxSurge"
    );

    second.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    stop.cancel();
    srv.stop().await;
    Ok(())
}
