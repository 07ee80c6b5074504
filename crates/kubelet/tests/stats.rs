//! The kubelet's `/stats/summary`, `/metrics` and `/metrics/cadvisor` on the real
//! containerd of this machine, read over the read-only port: a busybox pod that writes
//! 256 KiB into an emptyDir shows up with its container's CPU and memory, the volume's
//! usage and its ephemeral storage; the metrics pages carry upstream's names.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::{start_kubelet_with, stop_kubelet, wait_for};
use ferrokube_kubelet::server::{Endpoints, bind};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, Pod, PodSpec, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;

/// GET `path` from the kubelet; the body of a 200 answer.
fn get(addr: SocketAddr, path: &str) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: kubelet\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    ensure!(
        out.starts_with("HTTP/1.1 200"),
        "GET {path}: {}",
        &out[..out.len().min(300)]
    );
    let (_, body) = out.split_once("\r\n\r\n").context("no body")?;
    Ok(body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_and_metrics_on_real_containerd() {
    let server = TestApiServer::start().await.expect("test apiserver");
    let client = server.client.clone();
    let node_name = format!("fk-stats-{}", std::process::id());
    let root = tempfile::tempdir().expect("root dir");
    let mut kubelet =
        Some(start_kubelet_with(client.clone(), &node_name, root.path(), |_| {}).await);
    let k = kubelet.as_ref().expect("kubelet").kubelet.clone();
    let cancel = kubelet.as_ref().expect("kubelet").cancel.clone();
    let (addr, _srv) = bind(
        "127.0.0.1:0".parse().expect("addr"),
        k.clone(),
        Endpoints::ReadOnly,
        cancel,
    )
    .await
    .expect("read-only port");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("stats".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node_name.clone()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "writer".into(),
                image: Some("docker.io/library/busybox:latest".into()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec![
                    "sh".into(),
                    "-c".into(),
                    "dd if=/dev/urandom of=/scratch/f bs=1024 count=256 && exec sleep 3600".into(),
                ]),
                volume_mounts: Some(vec![VolumeMount {
                    name: "scratch".into(),
                    mount_path: "/scratch".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "scratch".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let mut created = None;

    let result = async {
        created = Some(pods.create(&PostParams::default(), &pod).await?);
        let p = wait_for("pod Running", Duration::from_secs(60), || async {
            let p = pods.get("stats").await?;
            Ok(
                (p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                    .then_some(p),
            )
        })
        .await?;
        let uid = p.metadata.uid.clone().context("uid")?;

        let summary: Value = wait_for(
            "the pod in /stats/summary",
            Duration::from_secs(30),
            || async {
                let v: Value = serde_json::from_str(
                    &tokio::task::spawn_blocking(move || get(addr, "/stats/summary")).await??,
                )?;
                let pod = v["pods"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|p| p["podRef"]["uid"] == uid.as_str())
                    .cloned();
                let ready = pod.as_ref().is_some_and(|p| {
                    p["volume"][0]["usedBytes"].as_u64().unwrap_or(0) >= 256 * 1024
                        && p["containers"][0]["memory"]["workingSetBytes"]
                            .as_u64()
                            .is_some()
                });
                Ok(ready.then_some(v))
            },
        )
        .await?;
        ensure!(summary["node"]["nodeName"] == node_name.as_str());
        ensure!(
            summary["node"]["memory"]["workingSetBytes"]
                .as_u64()
                .unwrap_or(0)
                > 0,
            "{}",
            summary["node"]
        );
        ensure!(summary["node"]["fs"]["capacityBytes"].as_u64().unwrap_or(0) > 0);
        ensure!(
            summary["node"]["runtime"]["imageFs"]["usedBytes"]
                .as_u64()
                .unwrap_or(0)
                > 0,
            "{}",
            summary["node"]
        );
        let pod = summary["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["podRef"]["name"] == "stats")
            .context("pod in the summary")?;
        ensure!(pod["podRef"]["namespace"] == "default");
        let c = &pod["containers"][0];
        ensure!(c["name"] == "writer", "{c}");
        ensure!(
            c["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0) > 0,
            "{c}"
        );
        ensure!(c["rootfs"].is_object() && c["logs"].is_object(), "{c}");
        ensure!(pod["volume"][0]["name"] == "scratch", "{pod}");
        let eph = pod["ephemeral-storage"]["usedBytes"].as_u64().unwrap_or(0);
        ensure!(
            eph >= 256 * 1024,
            "ephemeral storage counts the emptyDir: {pod}"
        );

        let metrics = tokio::task::spawn_blocking(move || get(addr, "/metrics")).await??;
        for line in [
            "kubelet_running_containers{container_state=\"running\"}",
            "kubelet_runtime_operations_total{operation_type=\"run_podsandbox\"} ",
            "kubelet_runtime_operations_total{operation_type=\"start_container\"} ",
            "kubelet_pod_start_duration_seconds_count 1",
        ] {
            ensure!(metrics.contains(line), "{line} in\n{metrics}");
        }
        let running: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_running_pods "))
            .context("kubelet_running_pods")?
            .parse()?;
        ensure!(running >= 1);
        let relists: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("kubelet_pleg_relist_duration_seconds_count "))
            .context("relist count")?
            .parse()?;
        ensure!(relists >= 1);

        let cadvisor =
            tokio::task::spawn_blocking(move || get(addr, "/metrics/cadvisor")).await??;
        ensure!(
            cadvisor.lines().any(|l| l
                .starts_with("container_cpu_usage_seconds_total{container=\"writer\",")
                && l.contains("namespace=\"default\",pod=\"stats\"}")),
            "{cadvisor}"
        );
        ensure!(cadvisor.contains("container_memory_working_set_bytes{container=\"writer\""));
        Ok::<(), anyhow::Error>(())
    }
    .await;

    if let Some(r) = kubelet.take() {
        if let Some(p) = &created {
            let _ = r.kubelet.runtime().kill_pod(p, Some(1)).await;
        }
        stop_kubelet(r).await;
    }
    server.stop().await;
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
