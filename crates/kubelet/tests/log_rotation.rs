//! Container log rotation in a whole kubelet against a real in-process apiserver
//! (TestApiServer) and this machine's containerd: with a 4Ki size limit and 4 files, a
//! chatty container's log is rotated (containerd reopens it through CRI
//! ReopenContainerLog and keeps writing into the live file, which `kubectl logs` reads),
//! older rotations but the newest are gzipped and no more than 3 rotated files remain.
//! Run it under `flock /run/ferrokube-e2e.lock`.

mod common;

use std::time::Duration;

use anyhow::ensure;
use ferrokube_kubelet::log_rotation::LogRotationPolicy;
use ferrokube_kubelet::logs::parse_cri_line;
use ferrokube_kubelet::sandbox::pod_log_dir;
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use common::{start_kubelet_with, stop_kubelet, wait_for};

/// The last line's counter in a CRI log file, if any.
fn last_counter(path: &std::path::Path) -> Option<u64> {
    let data = std::fs::read(path).ok()?;
    data.split(|b| *b == b'\n')
        .filter_map(|l| parse_cri_line(l).ok())
        .filter_map(|l| {
            std::str::from_utf8(l.content)
                .ok()?
                .strip_prefix("line-")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .next_back()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chatty_container_logs_are_rotated_and_stay_readable() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-lr-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let kubelet = start_kubelet_with(client.clone(), &node_name, root.path(), |cfg| {
        cfg.container_log = LogRotationPolicy {
            max_size: 4 << 10,
            max_files: 4,
            monitor_interval: Duration::from_secs(1),
        };
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut created = None;

    let result = async {
        let p: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "chatty", "namespace": "default"},
            "spec": {
                "nodeName": node_name,
                "terminationGracePeriodSeconds": 2,
                "containers": [{"name": "c", "image": "docker.io/library/busybox:latest",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c",
                        "i=0; while true; do echo \"line-$i padding-padding-padding-padding-padding\"; i=$((i+1)); sleep 0.01; done"]}],
            },
        }))?;
        let p = pods.create(&PostParams::default(), &p).await?;
        created = Some(p.clone());
        let dir = pod_log_dir(kubelet.kubelet.runtime().node(), &p).join("c");
        let live = dir.join("0.log");
        // Two rotations at least: one gzipped, one plain (the newest).
        let rotated = wait_for("two rotations", Duration::from_secs(60), || {
            let dir = dir.clone();
            async move {
                let names: Vec<String> = std::fs::read_dir(&dir)
                    .map(|d| {
                        d.flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .filter(|n| n.starts_with("0.log."))
                            .collect()
                    })
                    .unwrap_or_default();
                let gz = names.iter().any(|n| n.ends_with(".gz"));
                Ok((gz && names.len() >= 2).then_some(names))
            }
        })
        .await?;
        ensure!(rotated.len() <= 3, "at most max_files - 1 rotated files: {rotated:?}");
        ensure!(
            rotated.iter().all(|n| !n.ends_with(".tmp")),
            "{rotated:?}"
        );
        // The runtime writes into the live file after the rotations: its counter grows.
        let first = wait_for("lines in the live log", Duration::from_secs(20), || {
            let live = live.clone();
            async move { Ok(last_counter(&live)) }
        })
        .await?;
        let later = wait_for("more lines in the live log", Duration::from_secs(20), || {
            let live = live.clone();
            async move { Ok(last_counter(&live).filter(|n| *n > first)) }
        })
        .await?;
        ensure!(later > first);
        Ok::<(), anyhow::Error>(())
    }
    .await;

    if let Some(p) = &created {
        let _ = kubelet.kubelet.runtime().kill_pod(p, Some(0)).await;
    }
    stop_kubelet(kubelet).await;
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
