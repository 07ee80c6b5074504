//! In-place pod resize (`kubectl patch pod --subresource resize`) through a real
//! in-process apiserver (TestApiServer) and the whole kubelet on the real containerd of
//! this machine: the container's cgroup follows a cpu resize up and down without a
//! restart, a memory resize with `RestartContainer` restarts it with the new limit, a
//! resize beyond the node is `PodResizePending`/`Infeasible`, and the container statuses
//! report the allocated resources. Fails, never skips, when containerd is not reachable.
//! Run it under `flock /run/ferrokube-e2e.lock` when a cluster may share the runtime.

use std::time::Duration;

mod common;

use anyhow::{Context, Result, ensure};
use common::{start_kubelet_with, wait_for};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const BUSYBOX: &str = "docker.io/library/busybox:latest";

/// A cgroup v1 control file of the pod's container `id` (Burstable QoS).
fn container_cgroup(pod_uid: &str, id: &str, controller: &str, file: &str) -> Result<i64> {
    let path = format!("/sys/fs/cgroup/{controller}/kubepods/burstable/pod{pod_uid}/{id}/{file}");
    let text = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    Ok(text.trim().parse()?)
}

fn container_id(p: &Pod) -> Option<String> {
    let cs = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
    cs.state.as_ref()?.running.as_ref()?;
    Some(
        cs.container_id
            .as_ref()?
            .trim_start_matches("containerd://")
            .to_owned(),
    )
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map_or(0, |c| c.restart_count)
}

fn reported(p: &Pod) -> serde_json::Value {
    let r = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.resources.clone());
    serde_json::to_value(r).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_resize_in_place_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-rs-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let kubelet = start_kubelet_with(client.clone(), &node_name, root.path(), |_| {}).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    let result = async {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "resized", "namespace": "default"},
            "spec": {
                "nodeName": node_name,
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "app", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                    "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                                  "limits": {"cpu": "200m", "memory": "64Mi"}},
                }],
            },
        }))?;
        let created = pods.create(&PostParams::default(), &pod).await?;
        let pod_uid = created.metadata.uid.clone().context("uid")?;
        let running = wait_for("resized running", Duration::from_secs(60), || async {
            let p = pods.get("resized").await?;
            Ok(container_id(&p).map(|id| (p, id)))
        })
        .await?;
        let (p, id) = running;
        ensure!(
            reported(&p)
                == json!({"requests": {"cpu": "100m", "memory": "32Mi"},
                          "limits": {"cpu": "200m", "memory": "64Mi"}}),
            "{}",
            reported(&p)
        );
        ensure!(container_cgroup(&pod_uid, &id, "cpu", "cpu.cfs_quota_us")? == 20000);

        let resize = |patch: serde_json::Value| {
            let pods = pods.clone();
            async move {
                pods.patch_subresource("resize", "resized", &PatchParams::default(), &Patch::Strategic(patch))
                    .await
            }
        };
        // More cpu, then less: the same container, its cgroup changed in place.
        for (request, limit, quota, shares) in
            [("300m", "500m", 50000, 307), ("50m", "100m", 10000, 51)]
        {
            resize(json!({"spec": {"containers": [{"name": "app", "resources": {
                "requests": {"cpu": request}, "limits": {"cpu": limit}}}]}}))
            .await?;
            wait_for(&format!("cpu quota {quota}"), Duration::from_secs(30), || async {
                let q = container_cgroup(&pod_uid, &id, "cpu", "cpu.cfs_quota_us")?;
                let s = container_cgroup(&pod_uid, &id, "cpu", "cpu.shares")?;
                Ok((q == quota && s == shares).then_some(()))
            })
            .await?;
            let p = wait_for("the new cpu reported", Duration::from_secs(30), || async {
                let p = pods.get("resized").await?;
                Ok((reported(&p)["limits"]["cpu"] == json!(limit)).then_some(p))
            })
            .await?;
            ensure!(container_id(&p).as_deref() == Some(id.as_str()) && restarts(&p) == 0);
        }

        // Beyond the node: pending, nothing changes.
        resize(json!({"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "64"}, "limits": {"cpu": "64"}}}]}}))
        .await?;
        let p = wait_for("PodResizePending", Duration::from_secs(30), || async {
            let p = pods.get("resized").await?;
            let pending = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodResizePending").cloned());
            Ok(pending.map(|c| (p, c)))
        })
        .await?;
        let (p, pending) = p;
        ensure!(pending.reason.as_deref() == Some("Infeasible"), "{pending:?}");
        ensure!(
            pending.message.as_deref().is_some_and(|m| m.starts_with(
                "Node didn't have enough capacity: cpu, requested: 64000, capacity: "
            )),
            "{pending:?}"
        );
        ensure!(reported(&p)["limits"]["cpu"] == json!("100m"), "{}", reported(&p));
        ensure!(container_cgroup(&pod_uid, &id, "cpu", "cpu.cfs_quota_us")? == 10000);

        // Back within the node, and a lower memory limit: the container restarts for it.
        resize(json!({"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "50m"}, "limits": {"cpu": "100m", "memory": "48Mi"}}}]}}))
        .await?;
        let (p, new_id) = wait_for("restarted with 48Mi", Duration::from_secs(60), || async {
            let p = pods.get("resized").await?;
            let id = container_id(&p).filter(|new| *new != id && restarts(&p) == 1);
            Ok(id.map(|id| (p, id)))
        })
        .await?;
        ensure!(
            container_cgroup(&pod_uid, &new_id, "memory", "memory.limit_in_bytes")? == 48 << 20
        );
        ensure!(reported(&p)["limits"]["memory"] == json!("48Mi"), "{}", reported(&p));
        let conditions = p.status.and_then(|s| s.conditions).unwrap_or_default();
        ensure!(
            !conditions.iter().any(|c| c.type_.starts_with("PodResize")),
            "{conditions:?}"
        );
        Ok::<(), anyhow::Error>(())
    }
    .await;

    let _ = pods.delete("resized", &DeleteParams::default()).await;
    let _ = wait_for("resized gone", Duration::from_secs(30), || async {
        Ok(pods.get_opt("resized").await?.is_none().then_some(()))
    })
    .await;
    kubelet.cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(20), kubelet.task).await;
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
