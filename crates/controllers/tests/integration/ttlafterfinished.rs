//! The TTL-after-finished controller on the test apiserver, under its own
//! ServiceAccount. No job controller runs: the test marks the Job Complete itself.
//! Every wait is bounded.

use crate::support;

use std::time::Duration;

use ferrokube_controllers::manager::{Manager, ManagerConfig};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::wait_for;
use tokio_util::sync::CancellationToken;

fn job(name: &str, ttl: Option<i32>) -> anyhow::Result<Job> {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox"}]}}}
    });
    if let Some(ttl) = ttl {
        v["spec"]["ttlSecondsAfterFinished"] = json!(ttl);
    }
    Ok(serde_json::from_value(v)?)
}

async fn complete(api: &Api<Job>, name: &str) -> anyhow::Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = json!({"status": {
        "startTime": now, "completionTime": now, "succeeded": 1,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
            {"type": "Complete", "status": "True", "lastTransitionTime": now}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

#[tokio::test]
async fn finished_jobs_go_after_their_ttl() -> anyhow::Result<()> {
    let srv = TestApiServer::start().await?;
    let c = srv.client.clone();
    let cancel = CancellationToken::new();
    let cfg = ManagerConfig {
        // The garbage collector finishes the foreground deletion.
        controllers: vec!["ttl-after-finished".into(), "garbagecollector".into()],
        connection: Some(srv.kube_config().await?),
        use_service_account_credentials: true,
        ..Default::default()
    };
    let manager_client = srv.client_as("system:kube-controller-manager", &[]).await?;
    let manager = Manager::start(manager_client, &cfg, cancel.clone()).await?;
    let jobs: Api<Job> = Api::namespaced(c.clone(), "default");
    let pp = PostParams::default();
    jobs.create(&pp, &job("keep", None)?).await?;
    jobs.create(&pp, &job("ttl", Some(1))?).await?;
    complete(&jobs, "keep").await?;
    complete(&jobs, "ttl").await?;
    wait_for(30, "the finished Job with a TTL deleted", || async {
        Ok(jobs.get_opt("ttl").await?.is_none().then_some(()))
    })
    .await?;
    // The one without a TTL was seen in the same informer stream and stays.
    assert!(jobs.get_opt("keep").await?.is_some());

    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), manager.wait()).await;
    srv.stop().await;
    Ok(())
}
