//! What a starting kubelet finds: pods already Terminating (deleted while it was down)
//! are killed with the grace they have left and finished in the API, also when their
//! containers are gone; a pod whose containers vanished while the kubelet was down is run
//! again. The whole kubelet against a real in-process apiserver (TestApiServer) and this
//! machine's containerd. Run it under `flock /run/ferrokube-e2e.lock`.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use common::{connect_cri, start_kubelet_with, stop_kubelet, wait_for};

const BUSYBOX: &str = "docker.io/library/busybox:latest";

fn sleeper(name: &str, node: &str, grace: i64) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            // sleep as PID 1 ignores SIGTERM: only the SIGKILL after the grace ends it.
            "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"]}],
        },
    }))?)
}

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_kubelet_finishes_terminating_pods_and_restores_lost_containers() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-rs-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let mut kubelet =
        Some(start_kubelet_with(client.clone(), &node_name, root.path(), |_| {}).await);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut created: Vec<Pod> = vec![];

    let result = async {
        // "terminating" keeps its containers; "vanished" loses them while the kubelet is
        // down, then is deleted; "lost" loses them and is not deleted.
        for (name, grace) in [("terminating", 6), ("vanished", 30), ("lost", 2)] {
            created.push(
                pods.create(&PostParams::default(), &sleeper(name, &node_name, grace)?)
                    .await?,
            );
        }
        for name in ["terminating", "vanished", "lost"] {
            wait_for(
                &format!("{name} Running"),
                Duration::from_secs(60),
                || async {
                    let p = pods.get(name).await?;
                    Ok((phase(&p) == Some("Running")).then_some(()))
                },
            )
            .await?;
        }
        stop_kubelet(kubelet.take().context("kubelet")?).await;

        // While the kubelet is down: the containers of two pods disappear, and two pods
        // are deleted (they stay Terminating: no kubelet finishes them).
        let cri = connect_cri().await;
        for p in &created[1..] {
            let pod_uid = p.metadata.uid.clone().context("uid")?;
            for s in cri.list_pod_sandboxes(None).await? {
                if s.metadata.as_ref().map(|m| m.uid.as_str()) == Some(pod_uid.as_str()) {
                    cri.stop_pod_sandbox(&s.id).await?;
                    cri.remove_pod_sandbox(&s.id).await?;
                }
            }
        }
        let started = std::time::Instant::now();
        for name in ["terminating", "vanished"] {
            pods.delete(name, &DeleteParams::default()).await?;
            let p = pods.get(name).await?;
            ensure!(
                p.metadata.deletion_timestamp.is_some(),
                "{name} is Terminating"
            );
        }

        let restarted = start_kubelet_with(client.clone(), &node_name, root.path(), |_| {}).await;
        let k = restarted.kubelet.clone();
        kubelet = Some(restarted);
        for name in ["terminating", "vanished"] {
            wait_for(
                &format!("{name} gone from the API"),
                Duration::from_secs(60),
                || async { Ok(pods.get_opt(name).await?.is_none().then_some(())) },
            )
            .await?;
        }
        // The kill honoured the grace left (6 s from the DELETE, SIGKILL at its end).
        ensure!(
            started.elapsed() >= Duration::from_secs(4),
            "terminating was killed before its grace period ran out ({:?})",
            started.elapsed()
        );
        for p in &created[..2] {
            let rt = k
                .runtime()
                .runtime_pod(p.metadata.uid.as_deref().unwrap_or_default())
                .await?;
            ensure!(
                rt.containers.is_empty() && rt.sandboxes.is_empty(),
                "{rt:?}"
            );
        }
        // The pod that lost its containers but was not deleted runs again.
        let lost_uid = created[2].metadata.uid.clone().context("uid")?;
        wait_for("lost runs again", Duration::from_secs(60), || {
            let k = k.clone();
            let pods = pods.clone();
            let lost_uid = lost_uid.clone();
            async move {
                let rt = k.runtime().runtime_pod(&lost_uid).await?;
                let p = pods.get("lost").await?;
                Ok((rt.sandboxes.len() == 1
                    && rt.containers.len() == 1
                    && phase(&p) == Some("Running"))
                .then_some(()))
            }
        })
        .await?;
        // Its container status says the instance it showed running ended unknown, as
        // upstream's after a reboot, and the new instance counts as a restart.
        let status = wait_for(
            "lost's status names the lost instance",
            Duration::from_secs(30),
            || async {
                let p = pods.get("lost").await?;
                let cs = p
                    .status
                    .and_then(|s| s.container_statuses)
                    .and_then(|cs| cs.into_iter().next());
                Ok(cs.filter(|c| {
                    c.state.as_ref().is_some_and(|s| s.running.is_some())
                        && c.last_state
                            .as_ref()
                            .and_then(|l| l.terminated.as_ref())
                            .is_some()
                }))
            },
        )
        .await?;
        let last = status
            .last_state
            .and_then(|l| l.terminated)
            .context("lastState")?;
        ensure!(
            last.exit_code == 137 && last.reason.as_deref() == Some("ContainerStatusUnknown"),
            "{last:?}"
        );
        ensure!(
            status.restart_count >= 1,
            "restartCount {}",
            status.restart_count
        );
        Ok::<(), anyhow::Error>(())
    }
    .await;

    if let Some(r) = kubelet.take() {
        for p in &created {
            let _ = r.kubelet.runtime().kill_pod(p, Some(0)).await;
        }
        stop_kubelet(r).await;
    }
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
